-- Heartbeats of DEVICES distinct launchers (default 1,000,000), each device in turn: at any rate
-- below DEVICES a second, every beat of a flush window is from a different device, as a fleet's are.
local devices = tonumber(os.getenv("DEVICES") or "1000000")
-- OFFSET: the device this load starts from (two loads, each on its own half of the fleet).
local offset = tonumber(os.getenv("OFFSET") or "0")
local versions = { "1.0.120", "1.0.120", "1.0.120", "1.0.119", "1.0.119", "1.0.118" }
local n = 0

request = function()
  n = n + 1
  local id = (n + offset) % devices
  local body = string.format(
    '{"deviceId":"bench-device-%d","os":"Windows","osVersion":"10.0.19045","appVersion":"%s"}',
    id,
    versions[id % #versions + 1]
  )
  -- nil path: the URL's (the service's heartbeat route, or the baseline's constant answer)
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, body)
end
