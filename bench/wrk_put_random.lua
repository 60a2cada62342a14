-- wrk script: PUT of unique keys (<prefix><thread>-<n>), each with 100 random lowercase letters
-- (values that compress little, unlike wrk_put.lua's repeated byte). Same arguments:
-- wrk -t1 -c64 -d8s -s bench/wrk_put_random.lua URL -- [replicas=A/F] [prefix=P]
-- prefix (default k): give each run its own, so a second run writes new keys.
local counter = 0
local threads = 0
local replicas = ""
local prefix = "k"

function setup(thread)
  thread:set("thread_id", threads) -- a global of that thread's own Lua state
  threads = threads + 1
end

function init(args)
  for _, arg in ipairs(args) do
    local name, setting = arg:match("^(%w+)=(.+)$")
    if name == "replicas" then replicas = "&replicas=" .. setting
    elseif name == "prefix" then prefix = setting
    else error("wrk_put_random.lua: unknown argument " .. arg .. " (replicas=A/F, prefix=P)") end
  end
end

function request()
  counter = counter + 1
  local path = "/v0/entity?id=" .. prefix .. thread_id .. "-" .. counter .. replicas
  local t = {}
  for i = 1, 100 do t[i] = string.char(math.random(97, 122)) end
  return wrk.format("PUT", path, nil, table.concat(t))
end
