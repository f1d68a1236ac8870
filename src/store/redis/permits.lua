-- Counting semaphores: the rules of src/store/permits.rs, applied atomically by the server's
-- clock. The helpers `announce` and `next_token` come first (scripts.rs). Layout and replies:
-- src/store/redis/permits.rs.
--
-- KEYS[1]: the semaphore's state, one string: a MessagePack array
--   {limit, holders, (owner, permits, token, expires) * holders, (owner, permits, expires,
--   ticket) * waiters}
-- with times in ms on the server's clock, the waiters in queue order, and the string's own
-- expiry at the last lease or place, so an idle semaphore leaves nothing behind.
-- KEYS[2]: the fencing counter of the slot (acquire and raise only).
-- ARGV[1]: the operation; the rest depend on it.

-- TIME is not deterministic: before Redis 5 a script must ask for its effects to be
-- replicated instead of itself (later versions always do, and keep the call as a no-op).
if redis.replicate_commands then redis.replicate_commands() end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- The state with lapsed holders and places dropped, and whether any were.
local function load()
  local holders, waiters, limit, purged = {}, {}, 0, false
  local raw = redis.call('GET', KEYS[1])
  if not raw then return holders, waiters, limit, purged end
  local s = cmsgpack.unpack(raw)
  limit = s[1]
  local i = 3
  for _ = 1, s[2] do
    if s[i + 3] > now then
      holders[#holders + 1] = {s[i], s[i + 1], s[i + 2], s[i + 3]}
    else
      purged = true
    end
    i = i + 4
  end
  while i <= #s do
    if s[i + 2] > now then
      waiters[#waiters + 1] = {s[i], s[i + 1], s[i + 2], s[i + 3]}
    else
      purged = true
    end
    i = i + 4
  end
  return holders, waiters, limit, purged
end

-- Writes the state back, expiring with its last lease or place (deleted once nothing is left).
local function save(holders, waiters, limit)
  local s, last = {limit, #holders}, now
  for _, h in ipairs(holders) do
    s[#s + 1], s[#s + 2], s[#s + 3], s[#s + 4] = h[1], h[2], h[3], h[4]
    if h[4] > last then last = h[4] end
  end
  for _, w in ipairs(waiters) do
    s[#s + 1], s[#s + 2], s[#s + 3], s[#s + 4] = w[1], w[2], w[3], w[4]
    if w[3] > last then last = w[3] end
  end
  if last <= now then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], cmsgpack.pack(s), 'PX', string.format('%d', last - now))
  end
end

local function find(list, owner)
  for i, e in ipairs(list) do
    if e[1] == owner then return i end
  end
  return nil
end

-- Queues `owner` for `qttl` ms: keeps (and renews) its place, or takes one at the back; with a
-- ticket (Redlock: the same on every server), in ticket order, so that every server orders
-- its waiters alike.
local function enqueue(waiters, owner, permits, qttl, ticket)
  local place = find(waiters, owner)
  if place then
    waiters[place][3] = now + qttl
    return
  end
  local entry = {owner, permits, now + qttl, ticket}
  if ticket > 0 then
    for i, w in ipairs(waiters) do
      if w[4] > ticket or (w[4] == ticket and w[1] > owner) then
        table.insert(waiters, i, entry)
        return
      end
    end
  end
  waiters[#waiters + 1] = entry
end

local op = ARGV[1]

if op == 'acquire' then
  -- ARGV: op, owner, permits, limit, ttl, queue ttl, ticket (0: none).
  -- Returns the token (a string), or false when refused.
  local owner, permits, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  local ttl, qttl, ticket = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  local holders, waiters, _, purged = load()
  local mine = find(holders, owner)
  if mine then
    holders[mine][4] = now + ttl
    save(holders, waiters, limit)
    return holders[mine][3]
  end
  local taken, ahead, place = 0, 0, nil
  for _, h in ipairs(holders) do taken = taken + h[2] end
  for i, w in ipairs(waiters) do
    if w[1] == owner then
      place = i
      break
    end
    ahead = ahead + w[2]
  end
  if taken + ahead + permits <= limit then
    if place then table.remove(waiters, place) end
    local token = next_token(KEYS[2])
    holders[#holders + 1] = {owner, permits, token, now + ttl}
    save(holders, waiters, limit)
    return token
  end
  if qttl > 0 then
    enqueue(waiters, owner, permits, qttl, ticket)
    save(holders, waiters, limit)
  elseif purged then
    save(holders, waiters, limit)
  end
  return false
end

if op == 'extend' then
  -- ARGV: op, owner, ttl. Returns the semaphore's limit if extended, else 0.
  local holders, waiters, limit = load()
  local mine = find(holders, ARGV[2])
  if not mine then return 0 end
  holders[mine][4] = now + tonumber(ARGV[3])
  save(holders, waiters, limit)
  return limit
end

if op == 'release' then
  -- ARGV: op, owner, channel, sharded, then for Redlock's undo of a partial grant: permits,
  -- queue ttl, ticket (the place to keep, when the queue ttl is not 0).
  -- Returns {held live permits (1/0), subscribers the announcement reached (-1: none was
  -- made), limit}.
  local owner = ARGV[2]
  local holders, waiters, limit = load()
  local mine, place = find(holders, owner), find(waiters, owner)
  if mine then table.remove(holders, mine) end
  if place then table.remove(waiters, place) end
  local qttl = tonumber(ARGV[6] or '0')
  if qttl > 0 then enqueue(waiters, owner, tonumber(ARGV[5]), qttl, tonumber(ARGV[7])) end
  if mine or place or qttl > 0 then save(holders, waiters, limit) end
  if not (mine or place) then return {0, -1, limit} end
  return {mine and 1 or 0, announce(ARGV[3], ARGV[4]), limit}
end

if op == 'read' then
  -- Returns {limit, (owner, permits, token, remaining ms) * live holders}.
  local holders, _, limit = load()
  local out = {limit}
  for _, h in ipairs(holders) do
    out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] =
      h[1], h[2], h[3], string.format('%d', h[4] - now)
  end
  return out
end

if op == 'raise' then
  -- Redlock: if the owner still holds permits, lift the slot's counter to at least the token
  -- and make it the holder's own (counters are decimal strings: compared by length, then by
  -- digits). ARGV: op, owner, token. Returns 1 if held, else 0.
  local holders, waiters, limit = load()
  local mine = find(holders, ARGV[2])
  if not mine then return 0 end
  local token = ARGV[3]
  local c = redis.call('GET', KEYS[2])
  if not c or #c < #token or (#c == #token and c < token) then
    redis.call('SET', KEYS[2], token)
  end
  holders[mine][3] = token
  save(holders, waiters, limit)
  return 1
end

return redis.error_reply('unknown semaphore operation')
