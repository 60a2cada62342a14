-- wrk script: GET uniform over keys written by wrk_put.lua (k<thread>-<n>, 2 <= n <= KEYS;
-- wrk calls request() once for itself before the run, so n = 1 is never sent).
-- Usage: wrk -t2 -c64 -d10s -s bench/wrk_get.lua 'http://127.0.0.1:8080' -- KEYS [replicas]
local keys = 10000
local replicas = ""

function init(args)
  if args[1] then keys = tonumber(args[1]) end
  if args[2] then replicas = "&replicas=" .. args[2] end
end

function request()
  local path = "/v0/entity?id=k" .. math.random(0, 1) .. "-" .. math.random(2, keys) .. replicas
  return wrk.format("GET", path)
end
