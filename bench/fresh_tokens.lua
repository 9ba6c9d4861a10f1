-- A different JWT on every request, read from a pre-minted list (one a line).
--   wrk -t1 -c32 -d8s -s bench/fresh_tokens.lua URL -- TOKENS_FILE [START]
-- START (0-based) lets successive runs use tokens the gateway has not seen.
-- Past the end of the list the tokens wrap around; bench/run sizes the list so
-- that does not happen and says so in the table when it does.

local tokens = {}
local i = 0

function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then tokens[#tokens + 1] = line end
  end
  i = tonumber(args[2] or "0") % #tokens
end

function request()
  i = i + 1
  if i > #tokens then i = 1 end
  return wrk.format(nil, nil, { ["Authorization"] = "Bearer " .. tokens[i] })
end
