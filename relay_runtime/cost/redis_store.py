"""``RedisSpendStore``: conversation and profile spend shared by any number of workers on any number of machines.

One Lua script does both halves of a call's accounting, each atomically on the
server: ``reserve`` (before the call is sent) reads every budget's stored spend
and the reservations in flight, and reserves the call's worst case under all of
them or under none; ``settle`` (when the call ends) replaces the reservation with
what the call cost. Two workers can never both pass on the same headroom.

Each key is one Redis hash: field ``spent``, and one field ``r:<id>`` per
reservation in flight (``amount|deadline``, server time). A reservation whose
worker died expires at its deadline and stops holding budget.

A settle that timed out is tried again (``resettle``; see ``cost.unsettled``) and may still run after
its retry: redis-py drops the connection a timeout hit, and the retry goes out on another. So a
retry that adds spend leaves a set ``<prefix>:retried:<id>`` of the keys it added to, kept for
``reservation_ttl``; the settle it retried, arriving later, adds nothing to them.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

from ..urls import shown_url
from .store import DEFAULT_RESERVATION_TTL, Claim, Reservation, check_amount, check_claims, check_ttl

EXTRA = "journal-redis"

# KEYS: the claims' hashes. reserve: ARGV = op, id, amount, ttl, then limit and soft ("1"/"0") per key;
# returns {"ok", spent1, committed1, ...} or {"crossed", index, spent1, committed1, ...}.
# settle and resettle (a retry: adds only where the reservation is still held): KEYS end with the reservation's
# retry set; ARGV = op, id, amount, the set's lifetime in whole seconds; returns every claim key's new total.
# Floats travel as strings (RESP would truncate).
_SCRIPT = """
local function unreadable(key, name, value)
  -- NaN or a negative figure would make every later check pass: the budget silently gone.
  return redis.error_reply('spend hash ' .. key .. ' field ' .. name .. ' is unreadable: ' .. string.sub(value, 1, 80))
end
local function amount_of(text)
  local n = tonumber(text)
  if n == nil or n ~= n or n < 0 or n == math.huge then return nil end
  return n
end
local op = ARGV[1]
local id = 'r:' .. ARGV[2]
local amount = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
if op == 'settle' or op == 'resettle' then
  local retried = KEYS[#KEYS]
  local totals = {}
  for i = 1, #KEYS - 1 do
    local key = KEYS[i]
    -- A retry (resettle) adds only where the reservation is still held: a settle whose reply was lost ran.
    -- The settle, run after its retry (sent before it, on the connection its timeout dropped), adds only
    -- where the retry did not.
    local held = redis.call('HDEL', key, id) == 1
    if held or (op == 'settle' and redis.call('SISMEMBER', retried, key) == 0) then
      totals[i] = redis.call('HINCRBYFLOAT', key, 'spent', ARGV[3])
      if op == 'resettle' then
        redis.call('SADD', retried, key)
        redis.call('EXPIRE', retried, ARGV[4])
      end
    else
      totals[i] = redis.call('HGET', key, 'spent') or '0'
    end
  end
  return totals
end
local ttl = tonumber(ARGV[4])
local out = {}
for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[3 + 2 * i])
  local soft = ARGV[4 + 2 * i] == '1'
  local fields = redis.call('HGETALL', key)
  local spent, reserved = 0, 0
  for j = 1, #fields, 2 do
    local name, value = fields[j], fields[j + 1]
    if name == 'spent' then
      spent = amount_of(value)
      if spent == nil then return unreadable(key, name, value) end
    elseif string.sub(name, 1, 2) == 'r:' then
      local bar = string.find(value, '|', 1, true)
      local held = bar and amount_of(string.sub(value, 1, bar - 1))
      local deadline = bar and tonumber(string.sub(value, bar + 1))
      if held == nil or deadline == nil or deadline ~= deadline then return unreadable(key, name, value) end
      if deadline < now then
        redis.call('HDEL', key, name)
      else
        reserved = reserved + held
      end
    end
  end
  local committed = spent + reserved
  out[#out + 1] = string.format('%.17g', spent)
  out[#out + 1] = string.format('%.17g', committed)
  if committed + amount > limit and not (soft and committed < limit) then
    table.insert(out, 1, tostring(i))
    table.insert(out, 1, 'crossed')
    return out
  end
end
local held = string.format('%.17g', amount) .. '|' .. string.format('%.17g', now + ttl)
for _, key in ipairs(KEYS) do
  redis.call('HSET', key, id, held)
end
table.insert(out, 1, 'ok')
return out
"""


class RedisSpendStore:
    """Spend in Redis at ``url`` (``redis://host:port/db``), under ``prefix``; needs the ``journal-redis`` extra.

    ``reservation_ttl``: seconds a reservation holds budget when its worker never settles it (it died);
    keep it above your longest call. ``client``: a ``redis.Redis`` to use instead of one made from ``url``.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "relay:spend",
        reservation_ttl: float = DEFAULT_RESERVATION_TTL,
        timeout: float = 5.0,
        client: Any = None,
    ) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"prefix must be a non-empty string, got {prefix!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.reservation_ttl = check_ttl(reservation_ttl)
        self.prefix = prefix
        if client is None:
            try:
                import redis
            except ImportError as exc:
                raise ImportError(f"RedisSpendStore needs the redis package: pip install 'relay-runtime[{EXTRA}]'") \
                    from exc  # fmt: skip
            if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
                raise ValueError(f"RedisSpendStore takes a redis:// (or rediss://, unix://) url, got {shown_url(url)}")
            client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self.client = client
        self._script = client.register_script(_SCRIPT)

    def _key(self, key: str) -> str:
        if not isinstance(key, str) or not key:
            raise ValueError(f"spend keys are non-empty strings, got {key!r}")
        return f"{self.prefix}:{key}"

    def load(self, key: str) -> float:
        value = self.client.hget(self._key(key), "spent")
        return float(value) if value is not None else 0.0

    def add(self, key: str, amount: float) -> float:
        amount = check_amount(amount, "spend to add")
        return float(self.client.hincrbyfloat(self._key(key), "spent", repr(amount)))

    def reserve(self, claims: Sequence[Claim], amount: float) -> Reservation:
        check_claims(claims)
        amount = check_amount(amount, "a reservation")
        rid = uuid.uuid4().hex
        args: list[str] = ["reserve", rid, repr(amount), repr(self.reservation_ttl)]
        for claim in claims:
            args += [repr(float(claim.limit)), "1" if claim.soft else "0"]
        reply = self._script(keys=[self._key(c.key) for c in claims], args=args)
        words = [w.decode() if isinstance(w, bytes) else str(w) for w in reply]
        crossed: int | None = None
        if words[0] == "crossed":
            crossed = int(words[1]) - 1
            words = words[1:]
        figures = [float(w) for w in words[1:]]
        keys = tuple(c.key for c in claims)
        return Reservation(rid if crossed is None else "", keys, amount, tuple(figures[0::2]), tuple(figures[1::2]),
                           crossed)  # fmt: skip

    def settle(self, reservation: Reservation, amount: float) -> tuple[float, ...]:
        return self._settle(reservation, amount, "settle")

    def resettle(self, reservation: Reservation, amount: float) -> tuple[float, ...]:
        """``settle`` tried again after it raised: adds only under the keys that still hold the reservation (a
        settle whose reply was lost to a timeout ran on the server, and dropped it)."""
        return self._settle(reservation, amount, "resettle")

    def _settle(self, reservation: Reservation, amount: float, op: str) -> tuple[float, ...]:
        amount = check_amount(amount, "spend to settle")
        unique = list(dict.fromkeys(reservation.keys))  # two budgets on one key are charged once
        keys = [self._key(k) for k in unique]
        keys.append(f"{self.prefix}:retried:{reservation.id}")
        lifetime = str(math.ceil(self.reservation_ttl))
        reply = self._script(keys=keys, args=[op, reservation.id, repr(amount), lifetime])
        totals = {k: float(v) for k, v in zip(unique, reply, strict=True)}
        return tuple(totals[k] for k in reservation.keys)

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"<RedisSpendStore {self.prefix!r}>"
