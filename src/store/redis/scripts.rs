//! Lua scripts of the Redis store. Each runs atomically on the server, so compare-and-act never
//! touches a lock another owner holds. Key layout: see [`super::keys`].
//!
//! A lock key's value is the owner, as redislock writes it; the modern API appends
//! `0xFF <fencing token>` so `inspect` can report the holder's token without a key of its own.
//! Owners are UTF-8 and never contain `0xFF`, so "the value is the owner, or the owner
//! followed by `0xFF`" (`owns` below) is exactly "this owner holds it". A redislock process
//! compares the whole value with its own id, which never matches a deadbolt value, so the two
//! still exclude each other.
//!
//! A refused acquisition appends `0xFE` to a modern value ("someone waits"), and only such a
//! release is announced on the key's channel: a release nobody asked for publishes nothing
//! (~0.3 µs of Redis CPU less per release in a loop of the scripts alone, one command). The
//! mark outlives extensions and rides along in a handoff or a Redlock raise, since the
//! waiters it stands for still wait; a bare owner (redislock's format) is never changed, so
//! its release is always announced.
//!
//! Tokens are returned as decimal strings: `INCR`'s reply reaches Lua as a double, exact
//! below 2^53; above that the counter is read back with `GET`.

use redis::Script;
use std::sync::LazyLock;

/// Shared by the scripts, each with the name a script calls it by: owner comparison, whether
/// a value carries the waiters' mark (`0xFE` at its end), the release announcement (sharded
/// pub/sub on a cluster, falling back to `PUBLISH` before Redis 7), and the next token of a
/// counter as an exact decimal string (`INCR`'s reply is a Lua double, exact below 2^53;
/// above, read it back). None calls another.
const HELPERS: [(&str, &str); 4] = [
    (
        "owns",
        r#"
local function owns(v, o)
  if not v then return false end
  if v == o then return true end
  return #v > #o and string.byte(v, #o + 1) == 255 and string.sub(v, 1, #o) == o
end"#,
    ),
    (
        "waited",
        r#"
local function waited(v)
  return string.byte(v, -1) == 254
end"#,
    ),
    (
        "announce",
        r#"
local function announce(channel, sharded)
  if sharded == '1' then
    local n = redis.pcall('SPUBLISH', channel, '1')
    if type(n) == 'number' then return n end
  end
  return redis.call('PUBLISH', channel, '1')
end"#,
    ),
    (
        "next_token",
        r#"
local function next_token(counter)
  local n = redis.call('INCR', counter)
  if n < 9007199254740992 then return string.format('%d', n) end
  return redis.call('GET', counter)
end"#,
    ),
];

/// A script's source with the shared helpers it calls, and only those: Lua makes a closure of
/// every `local function` each time the script runs, and an unused one cost Redis ~0.2 µs per
/// acquisition and release in a loop of the scripts alone.
///
/// By default they go in front. A script whose common path calls none names them where they
/// are needed instead, on a line `--@ name name…` inside the block that calls them: that line
/// becomes their definitions, so the common path makes no closure at all (a closure and its
/// call cost Redis ~900 instructions, counted with callgrind; see bench/PROFILE.md).
fn with_helpers(body: &str) -> String {
    let helper = |name: &str| {
        HELPERS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, source)| *source)
            .unwrap_or_else(|| panic!("no Lua helper named {name}"))
    };
    if body.contains("--@ ") {
        let mut source = String::new();
        for line in body.lines() {
            let code = line.trim_start();
            match code.strip_prefix("--@ ") {
                Some(names) => {
                    let indent = &line[..line.len() - code.len()];
                    for name in names.split_whitespace() {
                        for helper_line in helper(name).lines().filter(|l| !l.is_empty()) {
                            source.push_str(indent);
                            source.push_str(helper_line);
                            source.push('\n');
                        }
                    }
                }
                None => {
                    source.push_str(line);
                    source.push('\n');
                }
            }
        }
        return source;
    }
    let mut source = String::new();
    for (name, helper) in HELPERS {
        if body.contains(&format!("{name}(")) {
            source.push_str(helper);
        }
    }
    source.push('\n');
    source.push_str(body);
    source
}

/// A script's source as sent: its helpers (see [`with_helpers`]), behind the key guard in
/// tests.
fn source(body: &str) -> String {
    guarded(with_helpers(body))
}

/// `source` unchanged: the guard is for tests only.
#[cfg(not(test))]
fn guarded(source: String) -> String {
    source
}

/// `source` behind the guard that fails a script touching a key it did not declare in
/// `KEYS` (see [`declared`]).
#[cfg(test)]
fn guarded(source: String) -> String {
    declared::guard() + &source
}

#[cfg(test)]
mod declared;

/// Acquire: draw a token from the slot's counter and take the lock key if it is absent
/// (`SET NX`, with the token in the value unless the mode has `p`), then store the payload
/// with the same lease. The uncontended path is two commands (`INCR`, `SET NX`) and calls no
/// helper (`next_token` is written out there; on Redis 7 the `SET` takes `GET` and returns
/// the value it found, before that a `GET` follows a failed `SET NX`); the lock key is read
/// only when the `SET NX` fails, and a refused request only burns a token, which keeps tokens
/// increasing. A refusal marks a modern value as waited for (`0xFE` appended, lease
/// unchanged), so that its release is announced.
///
/// Mode `n` (`fencing: false`) draws no token: the value is `owner 0xFF`, with nothing after
/// the separator, and the reply is `'0'`. Mode `pn` (the redislock face's default) draws none
/// either and writes the bare owner, redislock's value. The store sends them only when a
/// top-level `SET NX` found the key taken (or with a payload), so they mostly mark the
/// holder's value (`n`) or tell a retried request its own bare owner (`pn`).
///
/// A retried call whose first reply was lost finds its own lock and returns its token, with
/// the lease set anew so that it runs from this request, whatever gave the caller the lock (a
/// local handoff may have, just before).
///
/// When the mode has `l` (the store has not yet been granted this name, see
/// `super::legacy`), the last key is the counter version 0.1 left for the name: it is carried
/// over (so no token goes backwards) and deleted: an integer without expiry is that counter,
/// since every lock key has an expiry.
///
/// Mode `a<digits>` (Redlock) tags the grant with its attempt: the value is `owner 0xFF token
/// 0xFD attempt`, and only the same attempt finds it its own again; another attempt of the
/// same owner is refused without a mark (see `store::redlock`: a late give-back of one
/// attempt, [`RELEASE_ATTEMPT`], must never meet another attempt's grant).
///
/// KEYS: lock, fence, [data: with a payload], [legacy fence: mode `l`]. ARGV: owner, ttl ms,
/// [mode: `p` plain (redislock's value, no token in it), `l` legacy check, `n` no token,
/// `pn` plain and no token, `a<digits>` an attempt's tag, or empty], \[payload\]. The common call sends two keys and two arguments: every key or argument
/// costs Redis ~0.15 µs, and a data key and a token flag on every call cost it ~0.3–0.45 µs
/// per acquisition in a loop of the script alone.
/// Returns the token (a string), or false when held by another owner.
pub static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(&source(ACQUIRE_LUA)));
const ACQUIRE_LUA: &str = r#"
local owner, ttl, mode = ARGV[1], ARGV[2], ARGV[3] or ''
local token, value
local attempt = ''
if mode == 'n' then
  token, value = '0', owner .. '\255'
elseif mode == 'pn' then
  token, value = '0', owner
else
  local n = redis.call('INCR', KEYS[2])
  token = n < 9007199254740992 and string.format('%d', n) or redis.call('GET', KEYS[2])
  value = owner
  if mode == '' or not string.find(mode, 'p', 1, true) then value = value .. '\255' .. token end
  if mode ~= '' then
    attempt = string.match(mode, 'a(%d+)') or ''
    if attempt ~= '' and value ~= owner then value = value .. '\253' .. attempt end
  end
end
local v
if (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
  v = redis.call('SET', KEYS[1], value, 'NX', 'PX', ttl, 'GET')
elseif not redis.call('SET', KEYS[1], value, 'NX', 'PX', ttl) then
  v = redis.call('GET', KEYS[1])
end
if v then
  --@ owns waited
  if owns(v, owner) then
    local t, a = string.match(v, '\255(%d*)\253?(%d*)\254?$')
    if not t and mode == 'pn' and v == owner then t, a = '', '' end
    if t and a == attempt then
      redis.call('PEXPIRE', KEYS[1], ttl)
      if ARGV[4] then redis.call('PEXPIRE', KEYS[3], ttl) end
      if t == '' then return '0' end
      return t
    end
    return false
  end
  if string.find(v, '\255', 1, true) and not waited(v) then
    redis.call('APPEND', KEYS[1], '\254')
  end
  return false
end
if mode ~= '' and string.find(mode, 'l', 1, true) then
  local old = KEYS[#KEYS]
  local legacy = redis.call('GET', old)
  if legacy and string.match(legacy, '^%d+$') and redis.call('PTTL', old) == -1 then
    --@ next_token
    if #legacy > #token or (#legacy == #token and legacy >= token) then
      redis.call('SET', KEYS[2], legacy)
      token = next_token(KEYS[2])
      if value ~= owner then
        local tag = ''
        if attempt ~= '' then tag = '\253' .. attempt end
        redis.call('SET', KEYS[1], owner .. '\255' .. token .. tag, 'PX', ttl)
      end
    end
    redis.call('DEL', old)
  end
end
if ARGV[4] then
  redis.call('SET', KEYS[3], ARGV[4], 'PX', ttl)
end
return token
"#;

/// Extend: compare the owner, then set the remaining lease of the lock and, if it has one,
/// its data. KEYS: lock, data. ARGV: owner, ttl ms, has-data flag ("1"/"0"). Returns 1 if
/// owned, 0 otherwise.
pub static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(&source(EXTEND_LUA)));
const EXTEND_LUA: &str = r#"
if owns(redis.call('GET', KEYS[1]), ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] == '1' then
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
  return 1
end
return 0
"#;

/// Release: compare the owner, delete lock and data, and announce the release to waiters if
/// someone was refused the lock meanwhile (the value's mark) or it is a bare owner (no mark
/// is ever put there). Every release runs this, so the comparison (`owns`) and the mark's test
/// (`waited`) are written out instead of called, and `announce` is defined only where a
/// release is announced: no closure is made on the common path. The channel is made here
/// from the slot's tag, only when it is needed: sending it with every release cost ~0.3 µs of
/// Redis CPU, and the data key another ~0.4, so that goes only when the holder stored a
/// payload, and the sharding flag rides in front of the tag in one argument (~0.2 µs less
/// than two). KEYS: lock, \[data\]. ARGV: owner, the sharding flag ("1": `SPUBLISH`, on a
/// cluster) followed by the slot's tag. Returns 0 if not owned, otherwise 1 + the number of
/// subscribers the announcement reached, none when there was none (so the caller knows
/// whether others wait).
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(&source(RELEASE_LUA)));
const RELEASE_LUA: &str = r#"
local v, owner = redis.call('GET', KEYS[1]), ARGV[1]
if v == owner or (v and #v > #owner and string.byte(v, #owner + 1) == 255
    and string.sub(v, 1, #owner) == owner) then
  redis.call('DEL', unpack(KEYS))
  if v == owner or string.byte(v, -1) == 254 then
    --@ announce
    local spec = ARGV[2]
    return 1 + announce('deadbolt:released:{' .. string.sub(spec, 2) .. '}' .. KEYS[1],
      string.sub(spec, 1, 1))
  end
  return 1
end
return 0
"#;

/// Release of one attempt (Redlock's give-back of a partial grant, see `store::redlock`): as
/// [`RELEASE`], but only a grant of that attempt (its value tagged `0xFD attempt`, see
/// [`ACQUIRE`]) goes, never the same owner's grant of another attempt. KEYS: lock, \[data\].
/// ARGV: owner, the sharding flag followed by the slot's tag, the attempt. Returns as
/// [`RELEASE`].
pub static RELEASE_ATTEMPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&source(RELEASE_ATTEMPT_LUA)));
const RELEASE_ATTEMPT_LUA: &str = r#"
local v = redis.call('GET', KEYS[1])
if owns(v, ARGV[1]) and string.match(v, '\253(%d+)\254?$') == ARGV[3] then
  redis.call('DEL', unpack(KEYS))
  if waited(v) then
    local spec = ARGV[2]
    return 1 + announce('deadbolt:released:{' .. string.sub(spec, 2) .. '}' .. KEYS[1],
      string.sub(spec, 1, 1))
  end
  return 1
end
return 0
"#;

/// Force release (an operator's tool): delete the lock and its data whoever holds it, and
/// announce it. KEYS: lock, data. ARGV: channel, sharded. Returns 1 if a lock was there,
/// else 0.
pub static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&source(FORCE_RELEASE_LUA)));
const FORCE_RELEASE_LUA: &str = r#"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'string' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ', not a lock')
end
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[2])
  announce(ARGV[1], ARGV[2])
  return 1
end
return 0
"#;

/// Inspect: the lock key's value, remaining lease and data, read atomically.
/// KEYS: lock, data. Returns false when free, else {value, pttl, hasData, data}.
pub static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&guarded(INSPECT_LUA.to_string())));
const INSPECT_LUA: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return false end
local data = redis.call('GET', KEYS[2])
if data then
  return {v, redis.call('PTTL', KEYS[1]), 1, data}
end
return {v, redis.call('PTTL', KEYS[1]), 0, ''}
"#;

/// Handoff: compare the owner and give the lock straight to the next owner (a waiter in the
/// same process) with a new lease and fencing token, in one step. The lock is never free in
/// between, so nobody needs waking and nobody can barge. A retried call whose first reply was
/// lost finds the lock already with the next owner and returns its token (0 when the next
/// owner took it itself without one).
/// KEYS: lock, fence, data. ARGV: owner, next owner, ttl ms, next has data ("1"/"0"), data,
/// previous holder had data ("1"/"0"), next value's format ("1" with a token, "0" the bare
/// owner, "n" no token: nothing drawn, `owner 0xFF`, reply "0"; "pn" the bare owner and no
/// token, redislock's value, reply "0"), \[the next owner's attempt (Redlock): its grant is
/// tagged as [`ACQUIRE`]'s mode `a` tags one\]. Returns the new token (a string), or false
/// if not owned.
pub static HANDOFF: LazyLock<Script> = LazyLock::new(|| Script::new(&source(HANDOFF_LUA)));
const HANDOFF_LUA: &str = r#"
local v = redis.call('GET', KEYS[1])
local attempt = ARGV[8] or ''
if owns(v, ARGV[2]) then
  local t, a = string.match(v, '\255(%d*)\253?(%d*)\254?$')
  if not t and ARGV[7] == 'pn' and v == ARGV[2] then return '0' end
  if a ~= attempt then return false end
  if t == '' then return '0' end
  if t then return t end
  return false
end
if not owns(v, ARGV[1]) then return false end
local token, value = '0', ARGV[2]
if ARGV[7] == '1' or ARGV[7] == '0' then token = next_token(KEYS[2]) end
if ARGV[7] == '1' or ARGV[7] == 'n' then
  value = value .. '\255'
  if ARGV[7] == '1' then value = value .. token end
  if attempt ~= '' then value = value .. '\253' .. attempt end
  if waited(v) then value = value .. '\254' end
end
redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
if ARGV[4] == '1' then
  redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[3])
elseif ARGV[6] == '1' then
  redis.call('DEL', KEYS[3])
end
return token
"#;

/// Raise (Redlock): if the owner still holds the lock, lift the slot's fencing counter to at
/// least the given token and write that token into the lock's value (lease unchanged), so
/// that this server, like the rest of a quorum, counts past the token the client reported.
/// Counters are decimal strings without leading zeros: compared by length, then by digits.
/// With an attempt, only a grant of that attempt counts as owned, and its tag stays.
/// KEYS: lock, fence. ARGV: owner, token, \[attempt\]. Returns 1 if owned, else 0.
pub static RAISE: LazyLock<Script> = LazyLock::new(|| Script::new(&source(RAISE_LUA)));
const RAISE_LUA: &str = r#"
local v = redis.call('GET', KEYS[1])
if not owns(v, ARGV[1]) then return 0 end
local tag = ''
if ARGV[3] then
  if string.match(v, '\253(%d+)\254?$') ~= ARGV[3] then return 0 end
  tag = '\253' .. ARGV[3]
end
local c = redis.call('GET', KEYS[2])
if not c or #c < #ARGV[2] or (#c == #ARGV[2] and c < ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
if v ~= ARGV[1] then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    local mark = ''
    if waited(v) then mark = '\254' end
    redis.call('SET', KEYS[1], ARGV[1] .. '\255' .. ARGV[2] .. tag .. mark, 'PX', ttl)
  end
end
return 1
"#;

/// New primary (Sentinel, see `super::sentinel::enter`): the marker names the configuration
/// epoch and replication history whose counters were last lifted (`"<epoch> <replid>"`, or a
/// bare replid: epoch unknown). In a later epoch, lift every slot's fencing counter to at
/// least the epoch's floor (creating it there); on a new history, add the step on top; then
/// mark the epoch (the later of the two) and history. Counters are decimal strings without
/// leading zeros: compared by length, then by digits. KEYS: the marker, then every counter.
/// ARGV: the epoch (empty: unknown), the replication id, the floor, the step, floor + step.
/// Returns 1 if it
/// lifted them, 0 if another client had. Sent with `EVAL`, once per look-up that finds a
/// primary or epoch new to the client.
pub static NEW_PRIMARY: LazyLock<String> = LazyLock::new(|| source(NEW_PRIMARY_LUA));
const NEW_PRIMARY_LUA: &str = r#"
local m = redis.call('GET', KEYS[1])
local seen, history = nil, m
if m then
  local e, id = string.match(m, '^(%d+) (.*)$')
  if e then seen, history = e, id end
end
local later = ARGV[1] ~= '' and (seen == nil or tonumber(ARGV[1]) > tonumber(seen))
local moved = history ~= ARGV[2]
if not later and not moved then return 0 end
local floor, lifted = ARGV[3], ARGV[3]
if moved then lifted = ARGV[5] end
-- In chunks (unpack's limit): one MGET, one MSET for the counters below the floor.
for from = 2, #KEYS, 1000 do
  local to = math.min(from + 999, #KEYS)
  local counters = redis.call('MGET', unpack(KEYS, from, to))
  local below = {}
  for j = from, to do
    local c = counters[j - from + 1]
    if later and (not c or #c < #floor or (#c == #floor and c < floor)) then
      below[#below + 1] = KEYS[j]
      below[#below + 1] = lifted
    elseif moved then
      redis.call('INCRBY', KEYS[j], ARGV[4])
    end
  end
  if #below > 0 then redis.call('MSET', unpack(below)) end
end
if later then seen = ARGV[1] end
if seen then
  redis.call('SET', KEYS[1], seen .. ' ' .. ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
"#;

/// Counting semaphores: one script for every operation (`permits.lua`, the first argument
/// names it; see [`super::permits`]).
pub static PERMITS: LazyLock<Script> = LazyLock::new(|| Script::new(&source(PERMITS_LUA)));
const PERMITS_LUA: &str = include_str!("permits.lua");

/// `SCRIPT LOAD` of every script, to send ahead of a batch on a server that may not have them.
pub fn load_all() -> Vec<redis::Cmd> {
    [
        source(ACQUIRE_LUA),
        source(EXTEND_LUA),
        source(RELEASE_LUA),
        source(RELEASE_ATTEMPT_LUA),
        source(FORCE_RELEASE_LUA),
        guarded(INSPECT_LUA.to_string()),
        source(HANDOFF_LUA),
        source(RAISE_LUA),
        source(PERMITS_LUA),
    ]
    .into_iter()
    .map(|source| {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(source);
        cmd
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every script's body, by name.
    const BODIES: [(&str, &str); 9] = [
        ("acquire", ACQUIRE_LUA),
        ("extend", EXTEND_LUA),
        ("release", RELEASE_LUA),
        ("release attempt", RELEASE_ATTEMPT_LUA),
        ("force release", FORCE_RELEASE_LUA),
        ("inspect", INSPECT_LUA),
        ("handoff", HANDOFF_LUA),
        ("raise", RAISE_LUA),
        ("permits", PERMITS_LUA),
    ];

    #[test]
    fn a_script_carries_the_helpers_it_calls_and_no_other() {
        for (script, body) in BODIES {
            let source = with_helpers(body);
            assert!(
                !source.contains("--@"),
                "{script}: a placement line is left"
            );
            for (name, _) in HELPERS {
                let calls = body.contains(&format!("{name}("));
                let defines = source.matches(&format!("local function {name}(")).count();
                assert_eq!(defines, usize::from(calls), "{script}: {name}");
            }
        }
    }

    #[test]
    fn the_common_paths_of_acquire_and_release_make_no_closure() {
        // Placed helpers are defined inside the blocks that call them, never at the top level
        // the common path runs through.
        for body in [ACQUIRE_LUA, RELEASE_LUA] {
            let source = with_helpers(body);
            assert!(source.contains("local function"));
            for line in source.lines().filter(|l| l.contains("local function")) {
                assert!(line.starts_with(' '), "{line}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "no Lua helper named ownz")]
    fn a_placement_line_naming_no_helper_fails_at_once() {
        with_helpers("if x then\n  --@ ownz\nend");
    }
}

/// The key guard itself (see [`declared`]): that it knows every command the scripts call, and
/// that it fails a script touching a key it did not declare, so that every other test that
/// runs a script checks its keys.
#[cfg(test)]
mod guard_tests {
    use super::declared::KEY_POSITIONS;
    use super::*;
    use crate::store::conformance::server_or_skip;

    /// Every script's body and every helper, by name.
    fn sources() -> Vec<(&'static str, &'static str)> {
        let mut all = vec![
            ("acquire", ACQUIRE_LUA),
            ("extend", EXTEND_LUA),
            ("release", RELEASE_LUA),
            ("release attempt", RELEASE_ATTEMPT_LUA),
            ("force release", FORCE_RELEASE_LUA),
            ("inspect", INSPECT_LUA),
            ("handoff", HANDOFF_LUA),
            ("raise", RAISE_LUA),
            ("permits", PERMITS_LUA),
            ("new primary", NEW_PRIMARY_LUA),
        ];
        all.extend(HELPERS);
        all
    }

    #[test]
    fn the_guard_knows_the_key_positions_of_every_command_the_scripts_call() {
        let mut seen = 0;
        for (script, body) in sources() {
            for call in ["redis.call(", "redis.pcall("] {
                for (at, _) in body.match_indices(call) {
                    let rest = &body[at + call.len()..];
                    let command = rest
                        .strip_prefix('\'')
                        .and_then(|r| r.split('\'').next())
                        .unwrap_or_else(|| panic!("{script}: a command not named literally"));
                    assert!(
                        KEY_POSITIONS
                            .iter()
                            .any(|(c, _)| c.eq_ignore_ascii_case(command)),
                        "{script}: {command} is missing from the guard's table"
                    );
                    seen += 1;
                }
            }
        }
        assert!(seen > 30, "{seen} calls found");
    }

    async fn eval(source: &str, keys: &[&str]) -> redis::RedisResult<redis::Value> {
        let mut conn = redis::Client::open("redis://127.0.0.1:6379")
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(guarded(source.to_string())).arg(keys.len());
        for k in keys {
            cmd.arg(*k);
        }
        cmd.query_async(&mut conn).await
    }

    #[tokio::test]
    async fn the_guard_fails_a_script_that_touches_a_key_it_did_not_declare() {
        if !server_or_skip("Redis", 6379) {
            return;
        }
        let k = crate::store::conformance::name();
        let k2 = format!("{k}:2");
        let undeclared = [
            "return redis.call('GET', KEYS[1] .. ':other')",
            "return redis.pcall('INCR', 'deadbolt-guard-test:' .. KEYS[1])",
            "return redis.call('DEL', KEYS[1], KEYS[1] .. ':other')",
            "return redis.call('MSET', KEYS[1], '1', KEYS[1] .. ':other', '1')",
            "return redis.call('set', KEYS[1] .. ':other', '1', 'PX', 1000)",
            // A command the table does not know fails too, keys or not.
            "return redis.call('EXISTS', KEYS[1])",
        ];
        for body in undeclared {
            let err = eval(body, &[&k]).await.unwrap_err();
            assert!(
                err.to_string().contains("deadbolt key guard"),
                "{body}: {err}"
            );
        }
        // Declared keys, channels and key-less commands pass, and the real `redis` is
        // still reached for the rest.
        eval(
            "redis.call('SET', KEYS[2], '1', 'PX', 1000)
             redis.call('MSET', KEYS[1], 'a value, not a key', KEYS[2], '1')
             redis.call('PUBLISH', 'deadbolt-guard-test', '1')
             redis.call('TIME')
             return {redis.call('DEL', KEYS[1], KEYS[2]), redis.REDIS_VERSION_NUM ~= nil}",
            &[&k, &k2],
        )
        .await
        .unwrap();
    }
}
