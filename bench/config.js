'use strict'
// Every knob of the bench, from the environment (see bench/README.md). run.js passes the
// resolved config to each worker, so a worker started by hand uses the same defaults.

const int = (v, d) => (v === undefined || v === '' ? d : Math.max(0, Math.round(Number(v))))
const num = (v, d) => (v === undefined || v === '' ? d : Number(v))
const list = (v) => (v ? String(v).split(',').map((s) => s.trim()).filter(Boolean) : null)

function config(env = process.env) {
  return {
    runs: int(env.BENCH_RUNS, 3),
    only: list(env.BENCH_ONLY),
    scenarios: list(env.BENCH_SCENARIOS)?.map(Number) ?? [1, 2, 3, 4, 5],
    backends: list(env.BENCH_BACKENDS) ?? ['redis', 'mysql', 'postgres', 'sqlite', 'dynamodb'],
    urls: {
      redis: env.BENCH_REDIS_URL || 'redis://127.0.0.1:6379',
      mysql: env.BENCH_MYSQL_URL || 'mysql://root@127.0.0.1:3306/test',
      postgres: env.BENCH_PG_URL || 'postgres://postgres@127.0.0.1:5432/test',
      // run.js replaces it with a file in a fresh temporary directory.
      sqlite: env.BENCH_SQLITE_URL || null,
      // A deadbolt URL; its table and endpoint serve every DynamoDB library.
      dynamodb: env.BENCH_DYNAMODB_URL || 'dynamodb://dbbench_locks?region=us-east-1&endpoint=http://127.0.0.1:8000',
    },
    prefix: env.BENCH_PREFIX || 'dbbench',
    results: env.BENCH_RESULTS || null, // path of RESULTS.md; default bench/RESULTS.md for a full run
    // 1. sequential
    s1Warmup: int(env.BENCH_S1_WARMUP, 200),
    s1Pairs: int(env.BENCH_S1_PAIRS, 3000),
    s1MaxSeconds: num(env.BENCH_S1_MAX_SECONDS, 2),
    // 2. in flight
    s2Workers: int(env.BENCH_S2_WORKERS, 100),
    s2Seconds: num(env.BENCH_SECONDS, 3),
    s2WarmupMs: int(env.BENCH_S2_WARMUP_MS, 500),
    s2KeyCycle: int(env.BENCH_S2_KEY_CYCLE, 500),
    // 3. contention
    s3Workers: int(env.BENCH_S3_WORKERS, 20),
    s3Sections: int(env.BENCH_S3_SECTIONS, 1000),
    s3HoldMs: int(env.BENCH_S3_HOLD_MS, 1),
    s3MaxSeconds: num(env.BENCH_S3_MAX_SECONDS, 20),
    // 4. many held
    s4Locks: int(env.BENCH_S4_LOCKS, 10000),
    s4Concurrency: int(env.BENCH_S4_CONCURRENCY, 500),
    s4AcquireTimeoutMs: int(env.BENCH_S4_TIMEOUT_MS, 60000),
    stallMs: int(env.BENCH_STALL_MS, 3000),
    // 5. auto-extension
    s5Locks: int(env.BENCH_S5_LOCKS, 10000),
    s5Seconds: num(env.BENCH_S5_SECONDS, 5),
    s5SettleMs: int(env.BENCH_S5_SETTLE_MS, 1500),
    s5AcquireTimeoutMs: int(env.BENCH_S5_TIMEOUT_MS, 60000),
    mysqlConnMargin: int(env.BENCH_MYSQL_CONN_MARGIN, 20),
    // module load (bench/load.js): interleaved rounds of a fresh `node` requiring each library
    loadRounds: int(env.BENCH_LOAD_ROUNDS, 15),
  }
}

module.exports = { config }
