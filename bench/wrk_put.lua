-- wrk script: PUT of unique keys (a counter per thread), 100-byte values.
-- Usage: wrk -t2 -c64 -d10s -s bench/wrk_put.lua 'http://127.0.0.1:8080' -- [replicas]
local counter = 0
local threads = 0
local value = string.rep("v", 100)
local replicas = ""

function setup(thread)
  thread:set("thread_id", threads) -- a global of that thread's own Lua state
  threads = threads + 1
end

function init(args)
  if args[1] then replicas = "&replicas=" .. args[1] end
end

function request()
  counter = counter + 1
  local path = "/v0/entity?id=k" .. thread_id .. "-" .. counter .. replicas
  return wrk.format("PUT", path, nil, value)
end
