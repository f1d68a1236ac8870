'use strict'
// Scheduled jobs on three replicas: `node examples/jobs.js [url]` (default: the in-process
// memory:// store). Three clients stand for three processes of one service; each schedules
// the same every-second job, and each tick runs on exactly one of them. After five ticks it
// prints who ran each and the record `locks.jobs()` reads from the store.

const { connect } = require('..')

async function main(url = process.env.DEADBOLT_URL ?? 'memory://jobs-example') {
  const name = `example:report:${process.pid}`
  const replicas = []
  for (const replica of ['replica-a', 'replica-b', 'replica-c']) replicas.push(await connect(url, { name: replica }))
  const ran = []
  let done
  const five = new Promise((resolve) => { done = resolve })
  const jobs = replicas.map((locks, i) => locks.schedule(name, '* * * * * *', async ({ tick, fencingToken }) => {
    ran.push({ tick: new Date(tick).toISOString(), by: `replica-${'abc'[i]}`, fencingToken: String(fencingToken) })
    if (ran.length === 5) done()
  }, { atMostFor: 5_000, atLeastFor: 500 }))
  await five
  await Promise.all(jobs.map((job) => job.stop()))
  console.table(ran)
  const [record] = (await replicas[0].jobs({ prefix: name }))
  console.log('last run, as the store keeps it:', JSON.stringify(record))
  await replicas[0].forceRelease(`__deadbolt.jobs/${name}`)
  for (const locks of replicas) await locks.close()
}

main(process.argv[2]).catch((err) => {
  console.error(err)
  process.exit(1)
})
