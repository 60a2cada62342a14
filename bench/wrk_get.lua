-- wrk script: GET uniform over keys written by wrk_put.lua: <prefix><t>-<n> with
-- 0 <= t < threads and 2 <= n <= keys (wrk calls request() once in its first thread
-- before the run, so that thread never sends n = 1).
-- Usage: wrk -t1 -c64 -d8s -s bench/wrk_get.lua 'http://127.0.0.1:8080' -- keys=N \
--        [threads=T] [replicas=A/F] [prefix=P]
-- keys: written per thread (default 10000); threads: wrk_put.lua's -t (default 1);
-- replicas: sent with every request (default: none); prefix: wrk_put.lua's (default k).
local keys = 10000
local threads = 1
local replicas = ""
local prefix = "k"

function init(args)
  for _, arg in ipairs(args) do
    local name, setting = arg:match("^(%w+)=(.+)$")
    if name == "keys" then keys = tonumber(setting)
    elseif name == "threads" then threads = tonumber(setting)
    elseif name == "replicas" then replicas = "&replicas=" .. setting
    elseif name == "prefix" then prefix = setting
    else
      error("wrk_get.lua: unknown argument " .. arg .. " (keys=N, threads=T, replicas=A/F, prefix=P)")
    end
  end
end

function request()
  local thread = math.random(0, threads - 1)
  local path = "/v0/entity?id=" .. prefix .. thread .. "-" .. math.random(2, keys) .. replicas
  return wrk.format("GET", path)
end
