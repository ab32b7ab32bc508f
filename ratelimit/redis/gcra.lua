-- GCRA (a token bucket) on the server's clock, in microseconds.
-- KEYS[1]: the bucket's key, holding its theoretical arrival time (TAT):
--          when the bucket will be full again.
-- ARGV[1]: emission interval (microseconds per token)
-- ARGV[2]: capacity, burst * interval (microseconds)
-- ARGV[3]: n, the tokens to take (0 only reports)
-- Returns {allowed (0/1), remaining, reset_after_us, retry_after_us}.
-- Redis before 5 replicates scripts verbatim, which TIME forbids; this asks
-- for effects replication there and is a no-op later.
if redis.replicate_commands then redis.replicate_commands() end

local interval = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local n = tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local tat = tonumber(redis.call('GET', KEYS[1]))
if tat == nil or tat < now then
  tat = now
end

local new_tat = tat + n * interval
local diff = new_tat - now
if diff > capacity then
  return {0, math.floor((capacity - (tat - now)) / interval), tat - now, diff - capacity}
end
if n > 0 then
  -- %.0f keeps all 16 digits; tostring would round to 14. The key expires
  -- when the bucket is full again, when it is equivalent to no key.
  redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil(diff / 1000))
end
return {1, math.floor((capacity - diff) / interval), diff, 0}
