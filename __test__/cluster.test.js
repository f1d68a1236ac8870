'use strict'
// A Redis Cluster of three throwaway primaries under change: every slot of the node that
// serves a contended key is moved to another node (redis-cli --cluster reshard) while
// processes take turns on that key and a lock is kept alive by its heartbeat.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const Redis = require('ioredis')
const { connect } = require('..')
const { prefix } = require('./helpers')
const { startRedisCluster, startRedis } = require('./fixtures/redis-server')

function turns(target, key, counterUrl) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'turns.js'), JSON.stringify(target), key, '0', counterUrl], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', (d) => { out += d })
    child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`worker exited with ${code}`))))
  })
}

test('moving every slot of a busy node causes no overlap, no error and no lost heartbeat', async (t) => {
  const cluster = await startRedisCluster(t, 3)
  if (!cluster) return
  const counter = await startRedis()
  const target = { cluster: cluster.urls }
  const locks = await connect(target)
  const r = new Redis(counter.url)
  try {
    const k = prefix('cluster') + 'turns'
    const slot = Number(await cluster.cli(['-p', String(cluster.nodes[0].port), 'cluster', 'keyslot', k]))
    const nodes = await cluster.primaries()
    const from = nodes.find((n) => n.slots.some(([a, b]) => a <= slot && slot <= b))
    const to = nodes.find((n) => n !== from)
    const count = from.slots.reduce((sum, [a, b]) => sum + b - a + 1, 0)
    // A lease kept alive by heartbeats through the move (its key is in the same slot).
    let lost = null
    const kept = await locks.acquire(`{${k}}:kept`, { ttl: 1000, autoExtend: true, extendEvery: 100, onLost: (e) => { lost = e } })
    const runs = [0, 1, 2].map(() => turns(target, k, counter.url))
    while (Number(await r.get(`${k}:seq`)) < 50) await new Promise((res) => setTimeout(res, 20))
    await cluster.cli(['--cluster', 'reshard', `127.0.0.1:${from.port}`, '--cluster-from', from.id, '--cluster-to', to.id, '--cluster-slots', String(count), '--cluster-yes'])
    const moved = await cluster.primaries()
    assert.ok(moved.find((n) => n.id === to.id).slots.some(([a, b]) => a <= slot && slot <= b), 'the key\'s slot moved')
    const before = Number(await r.get(`${k}:seq`))
    while (Number(await r.get(`${k}:seq`)) < before + 50) await new Promise((res) => setTimeout(res, 20))
    await r.set(`${k}:stop`, '1')
    const lines = (await Promise.all(runs)).join('').trim().split('\n')
    assert.equal(lines.filter((l) => l.startsWith('lost')).length, 0, 'no holder lost its lock')
    const sections = lines.map((l) => l.split(' ')).map(([seq, token, inside]) => ({ seq: Number(seq), token: BigInt(token), inside: Number(inside) }))
    assert.ok(sections.length >= before + 50)
    assert.ok(sections.every((s) => s.inside === 1), 'nobody else was inside')
    sections.sort((a, b) => a.seq - b.seq)
    for (let i = 1; i < sections.length; i++) assert.ok(sections[i].token > sections[i - 1].token)
    assert.equal(lost, null, 'the heartbeat kept its lease through the move')
    assert.equal(kept.held, true)
    assert.equal(await kept.release(), true)
  } finally {
    r.disconnect()
    await locks.close()
    await counter.kill()
    await cluster.stop()
  }
})
