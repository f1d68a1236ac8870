//! Test-only guard: every key a script touches must be one of its `KEYS`.
//!
//! Redis Cluster routes a script by its declared keys and Dragonfly refuses a script that
//! touches any other, while a single Redis server runs it either way, so a key built inside
//! Lua (a counter from a slot's tag, a data key from a name) would pass every test on one
//! server. Under `cfg(test)` every script of the store is sent behind [`GUARD`]: a prelude
//! that shadows `redis` with a table whose `call` and `pcall` raise an error when a key
//! argument is not declared, or when the command is not one whose key positions it knows
//! (so a script that starts using a new command fails until the table says where its keys
//! are). Every Rust test that runs a script (the conformance suites, the permits, cluster,
//! legacy and Redlock tests) therefore checks it.

/// Commands the scripts call, with which of their arguments are keys: `first` the first,
/// `all` every one, `pairs` every other from the first (`MSET`), `none` none (a channel is
/// not a key).
pub const KEY_POSITIONS: [(&str, &str); 15] = [
    ("GET", "first"),
    ("INCRBY", "first"),
    ("SET", "first"),
    ("INCR", "first"),
    ("PEXPIRE", "first"),
    ("PTTL", "first"),
    ("APPEND", "first"),
    ("DEL", "all"),
    ("MGET", "all"),
    ("MSET", "pairs"),
    ("PUBLISH", "none"),
    ("SPUBLISH", "none"),
    ("PUBSUB", "none"),
    ("TIME", "none"),
    ("TYPE", "first"),
];

/// The prelude, `KEY_POSITIONS` filled in. A local `redis` shadows the global one for the
/// whole chunk, nested functions included (the global table is read-only from Redis 7 on).
pub fn guard() -> String {
    let table: String = KEY_POSITIONS
        .iter()
        .map(|(command, kind)| format!("{command}='{kind}',"))
        .collect();
    format!(
        r#"local redis = (function(real)
  local declared, positions = {{}}, {{{table}}}
  for _, k in ipairs(KEYS) do declared[k] = true end
  local function check(name, ...)
    local kind = positions[string.upper(name)]
    if not kind then error('deadbolt key guard: no key positions known for ' .. name) end
    local n = select('#', ...)
    local step = 1
    if kind == 'first' then n = math.min(n, 1) elseif kind == 'none' then n = 0 end
    if kind == 'pairs' then step = 2 end
    for i = 1, n, step do
      local key = select(i, ...)
      if not declared[key] then
        error('deadbolt key guard: undeclared key ' .. tostring(key) .. ' in ' .. name)
      end
    end
  end
  return setmetatable({{
    call = function(name, ...) check(name, ...) return real.call(name, ...) end,
    pcall = function(name, ...) check(name, ...) return real.pcall(name, ...) end,
  }}, {{__index = real}})
end)(redis)
"#
    )
}
