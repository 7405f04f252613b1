-- wrk script of scenario `publish`: POST /v1/events or POST /v1/messages, a distinct body per
-- request, the API key from the environment; prints one JSON line with what wrk measured.
--
--   WRK_KIND=events|messages WRK_KEY=dk_... WRK_FROM=+1555... \
--     wrk -t1 -c100 -d20s -s benchmarks/wrk/publish.lua http://127.0.0.1:PORT/v1/events
--
-- events:   {"type":"contact.updated","data":{"id":"<prefix><n>"}} (as benchmarks/client.py)
-- messages: {"from":WRK_FROM,"to":one of 10,000 numbers in turn,"text":"bench <prefix><n>"}
-- batch:    {"events":[100 of the events' objects]} (POST /v1/events/batch)
-- The minimal app (benchmarks/minimal_app.py) takes the events' body and ignores the key.

local kind = os.getenv("WRK_KIND") or "events"
local key = os.getenv("WRK_KEY") or ""
local sender = os.getenv("WRK_FROM") or ""
local prefix = os.getenv("WRK_PREFIX") or "W"
local counter = 0

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
if key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. key
end

request = function()
  counter = counter + 1
  local body
  if kind == "batch" then
    local items = {}
    for i = 1, 100 do
      items[i] = string.format('{"type":"contact.updated","data":{"id":"%s%d-%d"}}',
                               prefix, counter, i)
    end
    body = '{"events":[' .. table.concat(items, ",") .. ']}'
  elseif kind == "messages" then
    body = string.format('{"from":"%s","to":"+1555%07d","text":"bench %s%d"}',
                         sender, counter % 10000, prefix, counter)
  else
    body = string.format('{"type":"contact.updated","data":{"id":"%s%d"}}', prefix, counter)
  end
  return wrk.format(nil, nil, nil, body)
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"non_2xx":%d,"connect_errors":%d,"read_errors":%d,' ..
    '"write_errors":%d,"timeouts":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
