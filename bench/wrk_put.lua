-- wrk script: PUT of unique keys (<prefix><thread>-<n>, a counter per thread), 100-byte values.
-- Usage: wrk -t1 -c64 -d8s -s bench/wrk_put.lua 'http://127.0.0.1:8080' -- [replicas=A/F] [prefix=P]
--        [values=random]
-- replicas: sent with every request (default: none, the node's default); prefix (default k):
-- give each run its own so a second run writes new keys instead of overwriting the first's;
-- values: 100 times "v" (the default, which LevelDB's Snappy compresses tenfold), or with
-- values=random 100 random lowercase letters drawn for each request (little to compress).
local counter = 0
local threads = 0
local value = string.rep("v", 100)
local random_values = false
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
    elseif name == "values" and setting == "random" then random_values = true
    else error("wrk_put.lua: unknown argument " .. arg .. " (replicas=A/F, prefix=P, values=random)") end
  end
end

local function random_value()
  local letters = {}
  for i = 1, 100 do letters[i] = string.char(math.random(97, 122)) end
  return table.concat(letters)
end

function request()
  counter = counter + 1
  local path = "/v0/entity?id=" .. prefix .. thread_id .. "-" .. counter .. replicas
  return wrk.format("PUT", path, nil, random_values and random_value() or value)
end
