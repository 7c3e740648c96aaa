-- wrk script for the many-keys hit runs of `make bench-peers`: every
-- request asks for one of many distinct URLs, cycling through all of them.
--   BENCH_PATHS=<file>  one request path per line (the cluster runs), or
--   BENCH_KEYS=<n>      /k/0?size=1024 .. /k/<n-1>?size=1024 (default 10000);
--     BENCH_PREFIX and BENCH_QUERY replace "/k/" and "?size=1024"
--     (bench/misses.sh: a fresh prefix per run, so every key is new).
--   BENCH_STRIDE=<n>    how many keys apart the threads start (default
--     7919; bench/misses.sh sets it past a run's requests, so no thread
--     asks for a key another already fetched).
-- The requests are built once per thread in init(), so wrk's own cost per
-- request stays that of a static URL and the targets, not Lua, set the
-- pace. Threads start at different offsets so they do not ask for the
-- same key at the same time.

local threads = 0

function setup(thread)
   thread:set("offset", threads)
   threads = threads + 1
end

local reqs = {}
local i = 0

function init(args)
   local file = os.getenv("BENCH_PATHS")
   if file and file ~= "" then
      for line in io.lines(file) do
         if line ~= "" then reqs[#reqs + 1] = wrk.format("GET", line) end
      end
   else
      local keys = tonumber(os.getenv("BENCH_KEYS") or "10000")
      local prefix = os.getenv("BENCH_PREFIX") or "/k/"
      local query = os.getenv("BENCH_QUERY") or "?size=1024"
      for k = 0, keys - 1 do
         reqs[k + 1] = wrk.format("GET", prefix .. k .. query)
      end
   end
   assert(#reqs > 0, "keys.lua: no request paths")
   i = ((offset or 0) * tonumber(os.getenv("BENCH_STRIDE") or "7919")) % #reqs
end

function request()
   i = i % #reqs + 1
   return reqs[i]
end
