"""Where a run lives in Redis, and the one Lua script that appends to it.

Per run (ids are ``[A-Za-z0-9_.-]``, so ``:`` cannot occur inside one):

- ``<prefix>:run:<session>:<run>``: a stream; the row with seq N is entry ``N-0``
  with one field ``r``, the row's JSON exactly as the file store writes its line.
  Entry ids that are seqs make "after a cursor" an ``XRANGE``/``XREAD`` from ``<cursor>-0``.
- ``<prefix>:meta:<session>:<run>``: a hash: ``seq`` (last seq), ``bytes`` (rows'
  total size, for the cap), ``refused`` (rows refused at the cap), ``refused_ids``
  (the row ids the last append that refused any refused: a call retried after its
  reply was lost is not counted again, and a run at its cap keeps one batch's ids,
  not one per row it ever refused), ``done`` (a terminal row was written).
- ``<prefix>:ids:<session>:<run>``: a hash from the writer's row id to the seq it got,
  so an append retried after a lost reply returns the first one's seq instead of
  writing the row twice.
- ``<prefix>:where:<run>``: the session that last wrote a run of that id (finding a run
  without its session costs one GET).
- ``<prefix>:sessions`` and ``<prefix>:runs:<session>``: sorted sets of sessions and of a
  session's runs, scored by their last append (milliseconds); members whose run
  expired are pruned when listed. ``<prefix>:open:<session>`` counts the session's
  runs without a terminal row: while it is above 0 the session's list never expires,
  else it expires with the session's last finished run.

Retention: once a run has a terminal row, its keys expire ``retention`` seconds
after its last append. A run at its size cap refuses further rows (counted in
``refused``), except a terminal row within a small reserve, so the run's end is
still recorded; nothing is ever trimmed, so seq stays gapless from 1.

Every key of a run is written by one script call, so Redis applies an append
whole or not at all. The keys of one append do not share a hash slot: the store
is for a single Redis (with replicas or Sentinel), not Redis Cluster.
"""

from __future__ import annotations

DEFAULT_PREFIX = "relay:journal"
ROW_FIELD = b"r"

# The script's answer: a flat list, two numbers per row: its seq and one of these.
# For REFUSED and WRONG_SEQ the seq is the run's last; FOREIGN stops the batch (the error text follows).
APPENDED = 0
DUPLICATE = 1
REFUSED = 2
WRONG_SEQ = 3
FOREIGN = 4

# Appends rows to one run, in order, in one call (a direct append is a batch of one).
# KEYS: stream, meta, ids, where, sessions, runs, open
# ARGV: run_id, session_id, now_ms, retention_s, max_run_bytes, terminal_reserve,
#       expected seq of the first row (0: any),
#       then per row: row_id, terminal ("1"/"0"), tail (the row's JSON after its seq)
APPEND_SCRIPT = """
local stream, meta, ids, where, sessions, runs, open = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local run_id, session_id, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local retention, max_bytes, reserve = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local expected = tonumber(ARGV[7])
local state = redis.call('HMGET', meta, 'seq', 'bytes', 'done', 'refused_ids')
local seq = tonumber(state[1]) or 0
local bytes = tonumber(state[2]) or 0
local done = state[3] and true or false
local refused_before = {}
if state[4] then
  for _, id in ipairs(cjson.decode(state[4])) do refused_before[id] = true end
end
local refused, wrote, refused_ids = 0, false, {}
local out = {}
for i = 8, #ARGV, 3 do
  local row_id, terminal, tail = ARGV[i], ARGV[i + 1] == '1', ARGV[i + 2]
  local known = redis.call('HGET', ids, row_id)
  if known then
    out[#out + 1] = tonumber(known)
    out[#out + 1] = 1
  elseif expected > 0 and i == 8 and expected ~= seq + 1 then
    out[#out + 1] = seq
    out[#out + 1] = 3
  else
    local next_seq = seq + 1
    local row = '{"version":1,"event_id":"' .. run_id .. ':' .. next_seq .. '","seq":' .. next_seq .. tail
    local limit = max_bytes
    if terminal then
      limit = limit + reserve
    end
    if bytes + #row > limit then
      if not refused_before[row_id] then
        refused = refused + 1
      end
      refused_ids[#refused_ids + 1] = row_id
      out[#out + 1] = seq
      out[#out + 1] = 2
    else
      local ok = redis.pcall('XADD', stream, next_seq .. '-0', 'r', row)
      if type(ok) == 'table' and ok.err then
        out[#out + 1] = seq
        out[#out + 1] = 4
        out[#out + 1] = 'run journal stream ' .. stream .. ' holds an entry at or past ' .. next_seq ..
          '-0 that the journal did not write: ' .. ok.err
        break
      end
      seq, bytes, wrote = next_seq, bytes + #row, true
      redis.call('HSET', ids, row_id, seq)
      if terminal and not done then
        done = true
        redis.call('HSET', meta, 'done', '1')
        if seq > 1 then
          redis.call('DECR', open)  -- its first row opened it
        end
      elseif seq == 1 and not terminal then
        redis.call('INCR', open)
      end
      out[#out + 1] = seq
      out[#out + 1] = 0
    end
  end
end
if refused > 0 then
  redis.call('HINCRBY', meta, 'refused', refused)
end
if #refused_ids > 0 then
  redis.call('HSET', meta, 'refused_ids', cjson.encode(refused_ids))
end
if not wrote then
  return out
end
redis.call('HSET', meta, 'seq', seq, 'bytes', bytes)
redis.call('SET', where, session_id)
redis.call('ZADD', sessions, now, session_id)
redis.call('ZADD', runs, now, run_id)
if done then
  for _, key in ipairs({stream, meta, ids, where}) do
    redis.call('EXPIRE', key, retention)
  end
end
-- A session's list of runs lives as long as its longest-lived run: for good while one is open.
if (tonumber(redis.call('GET', open)) or 0) > 0 then
  redis.call('PERSIST', runs)
else
  redis.call('DEL', open)
  redis.call('EXPIRE', runs, retention)
end
return out
"""


class Keys:
    """Key names under one prefix."""

    __slots__ = ("prefix", "sessions")

    def __init__(self, prefix: str) -> None:
        if not isinstance(prefix, str) or not prefix or any(c.isspace() for c in prefix):
            raise ValueError(f"Redis key prefix must be a non-empty string without spaces, got {prefix!r}")
        self.prefix = prefix
        self.sessions = f"{prefix}:sessions"

    def stream(self, session_id: str, run_id: str) -> str:
        return f"{self.prefix}:run:{session_id}:{run_id}"

    def meta(self, session_id: str, run_id: str) -> str:
        return f"{self.prefix}:meta:{session_id}:{run_id}"

    def ids(self, session_id: str, run_id: str) -> str:
        return f"{self.prefix}:ids:{session_id}:{run_id}"

    def where(self, run_id: str) -> str:
        return f"{self.prefix}:where:{run_id}"

    def runs(self, session_id: str) -> str:
        return f"{self.prefix}:runs:{session_id}"

    def open(self, session_id: str) -> str:
        return f"{self.prefix}:open:{session_id}"

    def append_keys(self, session_id: str, run_id: str) -> list[str]:
        return [
            self.stream(session_id, run_id),
            self.meta(session_id, run_id),
            self.ids(session_id, run_id),
            self.where(run_id),
            self.sessions,
            self.runs(session_id),
            self.open(session_id),
        ]
