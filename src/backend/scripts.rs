//! Lua scripts of the Redis store. Each runs atomically on the server, so compare-and-act never
//! touches a lock another owner holds. The lock key's value is the owner token, exactly as
//! redislock writes it, so both libraries exclude each other on the same key.

use redis::Script;
use std::sync::LazyLock;

/// Acquire: `SET NX PX` on the lock key; on success bump the fencing counter and store the
/// data payload with the same lease. Without a payload there is nothing to clear: a data key
/// always expires or is deleted together with its lock key.
/// KEYS: lock, fence, data. ARGV: owner, ttl ms, has-data flag ("1"/"0"), data.
pub static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then
  local token = redis.call('INCR', KEYS[2])
  if ARGV[3] == '1' then
    redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[2])
  end
  return token
end
return false
"#,
    )
});

/// Extend: compare the owner, then set the remaining lease of the lock and, if it has one,
/// its data. KEYS: lock, data. ARGV: owner, ttl ms, has-data flag ("1"/"0"). Returns 1 if
/// owned, 0 otherwise.
pub static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] == '1' then
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
  return 1
end
return 0
"#,
    )
});

/// Release: compare the owner, delete lock and data, and announce the release to waiters.
/// KEYS: lock, data. ARGV: owner, channel. Returns 0 if not owned, otherwise 1 + the number
/// of subscribers the announcement reached (so the caller knows whether others wait).
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1 + redis.call('PUBLISH', ARGV[2], '1')
end
return 0
"#,
    )
});

/// Inspect: owner, remaining lease, latest fencing token and data, read atomically.
/// KEYS: lock, fence, data. Returns false when free, else {owner, pttl, token, hasData, data}.
pub static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local owner = redis.call('GET', KEYS[1])
if not owner then return false end
local data = redis.call('GET', KEYS[3])
local token = redis.call('GET', KEYS[2]) or '0'
if data then
  return {owner, redis.call('PTTL', KEYS[1]), token, 1, data}
end
return {owner, redis.call('PTTL', KEYS[1]), token, 0, ''}
"#,
    )
});

/// Handoff: compare the owner and give the lock straight to the next owner (a waiter in the
/// same process) with a new lease and fencing token, in one step. The lock is never free in
/// between, so nobody needs waking and nobody can barge.
/// KEYS: lock, fence, data. ARGV: owner, next owner, ttl ms, next has data ("1"/"0"), data,
/// previous holder had data ("1"/"0"). Returns the new token, or false if not owned.
pub static HANDOFF: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  local token = redis.call('INCR', KEYS[2])
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[3])
  elseif ARGV[6] == '1' then
    redis.call('DEL', KEYS[3])
  end
  return token
end
return false
"#,
    )
});
