-- Counting semaphores: the rules of src/store/permits.rs, applied atomically by the server's
-- clock. The helpers `announce` and `next_token` come first (scripts.rs). Layout and replies:
-- src/store/redis/permits.rs.
--
-- KEYS[1]: the semaphore's state, one string: a MessagePack array
--   {limit, holders, (owner, permits, token, expires) * holders, (owner, permits, expires,
--   ticket) * waiters}
-- A holder granted by a Redlock attempt has `owner 0xFD attempt` (decimal digits) for its
-- owner: a give-back of that attempt frees only it, and another attempt of the same owner is
-- refused it (see src/store/redlock/permits.rs). Calls without an attempt go by the owner,
-- tagged or not. (0xFD is never in UTF-8 text, so no owner a client names contains it.)
-- with times in ms on the server's clock, the waiters in queue order, and the string's own
-- expiry at the last lease or place, so an idle semaphore leaves nothing behind.
-- KEYS[2]: the fencing counter of the slot (acquire, handoff and raise only).
-- ARGV[1]: the operation; the rest depend on it.
--
-- Every call pays for TIME, the GET and the decoding; a write also for encoding and SET. So
-- the common calls are written to do nothing else they can avoid: a refused poll of a waiter
-- whose place has more than half of its time left writes nothing, a handoff puts the next
-- holder where the released one was, and numbers go to Redis as Lua numbers (exact below
-- 2^53) instead of being formatted.

-- TIME is not deterministic: before Redis 5 a script must ask for its effects to be
-- replicated instead of itself (later versions always do, and keep the call as a no-op).
if redis.replicate_commands then redis.replicate_commands() end
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)

-- The state as its flat array `s` (lapsed holders and places dropped), where holder i
-- (1-based) starts at s[4i - 1] and the waiters after the holders, plus whether any lapsed.
local function load()
  local raw = redis.call('GET', KEYS[1])
  if not raw then return {0, 0}, false end
  local s = cmsgpack.unpack(raw)
  local n, qs = #s, 3 + 4 * s[2]
  for i = 3, n, 4 do
    if s[i + (i < qs and 3 or 2)] <= now then
      -- Rare: copy what is live.
      local kept, count = {s[1], 0}, 0
      for j = 3, n, 4 do
        local holder = j < qs
        if s[j + (holder and 3 or 2)] > now then
          local k = #kept
          kept[k + 1], kept[k + 2], kept[k + 3], kept[k + 4] = s[j], s[j + 1], s[j + 2], s[j + 3]
          if holder then count = count + 1 end
        end
      end
      kept[2] = count
      return kept, true
    end
  end
  return s, false
end

-- Writes the state back, expiring with its last lease or place (deleted once nothing is left).
-- Returns the permits held and those queued, counted on the way.
local function save(s)
  local last, qs, taken, queued = now, 3 + 4 * s[2], 0, 0
  for i = 3, #s, 4 do
    local expires
    if i < qs then
      expires, taken = s[i + 3], taken + s[i + 1]
    else
      expires, queued = s[i + 2], queued + s[i + 1]
    end
    if expires > last then last = expires end
  end
  if last <= now then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], cmsgpack.pack(s), 'PX', last - now)
  end
  return taken, queued
end

-- Whether the holder entry's owner `e` is `owner`, bare or tagged by an attempt, and the
-- attempt's tag ('' when bare).
local function holds(e, owner)
  if e == owner then return true, '' end
  if #e > #owner + 1 and string.byte(e, #owner + 1) == 253 and string.sub(e, 1, #owner) == owner then
    local tag = string.sub(e, #owner + 2)
    if string.match(tag, '^%d+$') then return true, tag end
  end
  return false, ''
end

-- Indexes of `owner`'s entries among the holders and in the queue (nil: none), in one pass,
-- and the holder's attempt tag.
local function entries_of(s, owner)
  local qs, mine, place, tag = 3 + 4 * s[2], nil, nil, ''
  for i = 3, #s, 4 do
    if i < qs then
      local is, t = holds(s[i], owner)
      if is then mine, tag = i, t end
    elseif s[i] == owner then
      place = i
    end
  end
  return mine, place, tag
end

-- Index of `owner`'s entry among the holders (or nil), and its attempt tag.
local function holder_of(s, owner)
  for i = 3, 2 + 4 * s[2], 4 do
    local is, tag = holds(s[i], owner)
    if is then return i, tag end
  end
  return nil, ''
end

-- Index of `owner`'s entry in the queue, or nil.
local function place_of(s, owner)
  for i = 3 + 4 * s[2], #s, 4 do
    if s[i] == owner then return i end
  end
  return nil
end

-- Removes the entry at `i`.
local function remove_at(s, i)
  for _ = 1, 4 do table.remove(s, i) end
end

-- Removes the holder at `i`: its entry, and one from the count of holders.
local function remove_holder(s, i)
  remove_at(s, i)
  s[2] = s[2] - 1
end

-- Queues `owner` for `qttl` ms: keeps its place (renewed once less than half of `qttl` is
-- left: the waiter asks far more often than that, and a write is most of a call's cost), or
-- takes one at the back; with a ticket (Redlock: the same on every server), in ticket order,
-- so that every server orders its waiters alike. Returns whether `s` changed.
local function enqueue(s, owner, permits, qttl, ticket)
  local place = place_of(s, owner)
  if place then
    if s[place + 2] - now >= qttl / 2 then return false end
    s[place + 2] = now + qttl
    return true
  end
  if ticket > 0 then
    for i = 3 + 4 * s[2], #s, 4 do
      if s[i + 3] > ticket or (s[i + 3] == ticket and s[i] > owner) then
        table.insert(s, i, ticket)
        table.insert(s, i, now + qttl)
        table.insert(s, i, permits)
        table.insert(s, i, owner)
        return true
      end
    end
  end
  local n = #s
  s[n + 1], s[n + 2], s[n + 3], s[n + 4] = owner, permits, now + qttl, ticket
  return true
end

-- Grants `owner` its `permits` in `s` if they fit beside the holders and the queued requests
-- ahead of it (an owner that already holds gets its lease renewed and its own token), leaving
-- out the holder at `free` (a handoff's releasing owner, whose entry a new grant then takes).
-- With an `attempt` (Redlock), the grant is tagged with it, and an owner's entry of another
-- attempt (or none) is not its own: the request is refused.
-- Returns the token (or nil), whether the entry at `free` was taken, and whether the owner
-- holds by another attempt; the caller saves `s`.
local function grant(s, owner, permits, limit, ttl, free, attempt)
  local qs = 3 + 4 * s[2]
  local taken = 0
  for i = 3, qs - 1, 4 do
    if i ~= free then
      local is, tag = holds(s[i], owner)
      if is then
        if attempt and tag ~= attempt then return nil, false, true end
        s[i + 3] = now + ttl
        return s[i + 2], false
      end
      taken = taken + s[i + 1]
    end
  end
  local ahead, place = 0, nil
  for i = qs, #s, 4 do
    if s[i] == owner then
      place = i
      break
    end
    ahead = ahead + s[i + 1]
  end
  if taken + ahead + permits > limit then return nil, false end
  if place then remove_at(s, place) end
  local token = next_token(KEYS[2])
  local entry = owner
  if attempt then entry = owner .. '\253' .. attempt end
  if free then
    s[free], s[free + 1], s[free + 2], s[free + 3] = entry, permits, token, now + ttl
  else
    table.insert(s, qs, now + ttl)
    table.insert(s, qs, token)
    table.insert(s, qs, permits)
    table.insert(s, qs, entry)
    s[2] = s[2] + 1
  end
  return token, free ~= nil
end

local op = ARGV[1]

if op == 'acquire' then
  -- ARGV: op, owner, permits, limit, ttl, queue ttl, ticket (0: none), [attempt (Redlock:
  -- its tag, digits; absent or empty: none)].
  -- Returns the token (a string), or false when refused.
  local owner, permits, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  local qttl = tonumber(ARGV[6])
  local attempt = ARGV[8]
  if attempt == '' then attempt = nil end
  local s, purged = load()
  local token, _, other = grant(s, owner, permits, limit, tonumber(ARGV[5]), nil, attempt)
  if token then
    s[1] = limit
    save(s)
    return token
  end
  -- An owner holding by another attempt needs no place.
  local changed = not other and qttl > 0 and enqueue(s, owner, permits, qttl, tonumber(ARGV[7]))
  if changed or purged or (qttl > 0 and s[1] ~= limit) then
    s[1] = limit
    save(s)
  end
  return false
end

-- Calls `change(s, i)` on the live holder entry of the owner ARGV[2] names, saves, and
-- returns what `change` returned; 0 when that owner holds no live permits (or, given an
-- `attempt`, none of that attempt's).
local function change_holder(change, attempt)
  local s = load()
  local mine, tag = holder_of(s, ARGV[2])
  if not mine or (attempt and tag ~= attempt) then return 0 end
  local out = change(s, mine)
  save(s)
  return out
end

if op == 'extend' then
  -- ARGV: op, owner, ttl. Returns the semaphore's limit if extended, else 0.
  return change_holder(function(s, mine)
    s[mine + 3] = now + tonumber(ARGV[3])
    return s[1]
  end)
end

if op == 'release' then
  -- ARGV: op, owner, channel, sharded, then for Redlock's undo of a partial grant: permits,
  -- queue ttl, ticket (the place to keep, when the queue ttl is not 0), attempt (its tag,
  -- digits; empty: none).
  -- Returns {held live permits (1/0), subscribers the announcement reached (-1: none was
  -- made), limit}. An attempt's give-back that finds the owner holding by another attempt
  -- (a later one, granted before this give-back was read) changes nothing.
  local owner, attempt = ARGV[2], ARGV[8]
  local s = load()
  local mine, place, tag = entries_of(s, owner)
  if mine and attempt and attempt ~= '' and tag ~= attempt then return {0, -1, s[1]} end
  if place then remove_at(s, place) end
  if mine then remove_holder(s, mine) end
  local qttl = tonumber(ARGV[6] or '0')
  if qttl > 0 then enqueue(s, owner, tonumber(ARGV[5]), qttl, tonumber(ARGV[7])) end
  if mine or place or qttl > 0 then save(s) end
  if not (mine or place) then return {0, -1, s[1]} end
  return {mine and 1 or 0, announce(ARGV[3], ARGV[4]), s[1]}
end

-- Whether more than `ours` connections listen on `channel` (sharded and plain subscribers
-- both count: a cluster's announcement is sharded, a Redis before 7 falls back to plain).
local function others_listen(channel, sharded, ours)
  local n = redis.call('PUBSUB', 'NUMSUB', channel)[2]
  if sharded == '1' then
    local r = redis.pcall('PUBSUB', 'SHARDNUMSUB', channel)
    if type(r) == 'table' then n = n + r[2] end
  end
  return n > ours
end

if op == 'handoff' then
  -- Releases `owner`'s permits (and place), then grants the next owner's if they fit, in one
  -- step. ARGV: op, owner, channel, sharded, next owner, permits, limit, ttl, subscribers of
  -- the caller's own on the channel (0 or 1).
  -- Returns {held live permits (1/0), the next owner's token or false, subscribers the
  -- announcement reached (-1: none was made), permits a newcomer would find free}. The
  -- release is announced unless the next owner was granted and nothing is left free (then no
  -- other waiter could fit), or nobody but the caller listens: its own waiters learn from the
  -- reply (the room, or a refusal), and the announcement would only wake its head to ask in
  -- vain.
  local owner, limit = ARGV[2], tonumber(ARGV[7])
  local s = load()
  local mine, place = entries_of(s, owner)
  if place then remove_at(s, place) end
  s[1] = limit
  local token, took = grant(s, ARGV[5], tonumber(ARGV[6]), limit, tonumber(ARGV[8]), mine)
  if mine and not took then remove_holder(s, mine) end
  -- Permits held, and those a newcomer would find free beside the holders and the queue.
  local taken, queued = save(s)
  local room = limit - taken - queued
  if room < 0 then room = 0 end
  local heard = -1
  if (mine or place) and (not token or taken < limit)
    and others_listen(ARGV[3], ARGV[4], tonumber(ARGV[9] or '0')) then
    heard = announce(ARGV[3], ARGV[4])
  end
  return {mine and 1 or 0, token or false, heard, room}
end

if op == 'read' then
  -- Returns {limit, (owner, permits, token, remaining ms) * live holders}.
  local s = load()
  local out = {s[1]}
  for i = 3, 2 + 4 * s[2], 4 do
    -- The owner without an attempt's tag.
    local owner = string.match(s[i], '^(.-)\253%d+$') or s[i]
    out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] =
      owner, s[i + 1], s[i + 2], string.format('%d', s[i + 3] - now)
  end
  return out
end

if op == 'raise' then
  -- Redlock: if the owner still holds permits (given an attempt, that attempt's), lift the
  -- slot's counter to at least the token and make it the holder's own (counters are decimal
  -- strings: compared by length, then by digits). ARGV: op, owner, token, [attempt].
  -- Returns 1 if held, else 0.
  local attempt = ARGV[4]
  if attempt == '' then attempt = nil end
  return change_holder(function(s, mine)
    local token = ARGV[3]
    local c = redis.call('GET', KEYS[2])
    if not c or #c < #token or (#c == #token and c < token) then
      redis.call('SET', KEYS[2], token)
    end
    s[mine + 2] = token
    return 1
  end, attempt)
end

return redis.error_reply('unknown semaphore operation')
