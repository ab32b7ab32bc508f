-- bench/upload.lua — wrk script of bench/run-http.sh with UPLOAD_BYTES set:
-- every request is a POST with a body of N bytes ("x"s), N the script's
-- first argument:
--
--   wrk -t2 -c64 -d10s --latency -s bench/upload.lua http://127.0.0.1:18080/ -- 1048576
--
-- The body is made once per wrk thread, in init; with no request function
-- wrk formats the request once, after init, and sends those same bytes
-- every time.

function init(args)
   local n = tonumber(args[1])
   if n == nil or n < 1 or n ~= math.floor(n) then
      error("bench/upload.lua: the body size (the argument after --) must be a positive integer, got " .. tostring(args[1]))
   end
   wrk.method = "POST"
   wrk.body = string.rep("x", n)
   wrk.headers["Content-Type"] = "application/octet-stream"
end
