-- Runs the Neovim snippet of docs/EDITORS.md (MACHINE_SNIPPET, its `cmd` pointed at this checkout's server) in a
-- real headless Neovim and uses it as a user would: a note action through vim.lsp.buf.code_action (the snippet's
-- prompt handler answers), a selection tag in a Python file, :MachineValidate. Records deprecation warnings.
-- Environment: MACHINE_SNIPPET, MACHINE_TEST_DIR (project with chat.jsonl and code.py), MACHINE_RESULT.
local results = {
  version = tostring(vim.version().major) .. "." .. tostring(vim.version().minor),
  warnings = {},
  asked = {},
}
local dir = os.getenv("MACHINE_TEST_DIR")

-- Deprecation warnings go through vim.deprecate -> vim.notify_once / vim.notify: record every warning.
for _, name in ipairs({ "notify", "notify_once" }) do
  local original = vim[name]
  vim[name] = function(msg, level, ...)
    if level == vim.log.levels.WARN or level == vim.log.levels.ERROR or tostring(msg):find("deprecat") then
      table.insert(results.warnings, tostring(msg))
    end
    return original(msg, level, ...)
  end
end
vim.ui.input = function(opts, on_confirm)
  table.insert(results.asked, opts.prompt)
  on_confirm(results.answer)
end

local function store_rows()
  local path = dir .. "/.machine/tagged.jsonl"
  return vim.fn.filereadable(path) == 1 and #vim.fn.readfile(path) or 0
end

local function attached(bufnr)
  assert(vim.wait(20000, function()
    local c = vim.lsp.get_clients({ name = "machine-lsp", bufnr = bufnr })[1]
    return c ~= nil and c.initialized
  end, 20), "machine-lsp did not attach to " .. vim.api.nvim_buf_get_name(bufnr))
end

local function apply(title, range)
  local seen = {}
  vim.lsp.buf.code_action({
    filter = function(action)
      table.insert(seen, action.title)
      return action.title == title
    end,
    apply = true,
    range = range,
  })
  return seen
end

local function main()
  vim.cmd("source " .. vim.fn.fnameescape(os.getenv("MACHINE_SNIPPET")))
  vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/chat.jsonl"))
  attached(0)
  results.filetype = vim.bo.filetype
  results.answer = "too terse"
  apply("Tag as good with note…")
  assert(vim.wait(20000, function() return store_rows() == 1 end, 20), "the noted tag did not reach the store")
  results.rows_after_note = store_rows()
  results.answer = "" -- the plain tag offers a note: Enter on the empty answer skips it
  apply("Tag row as bad")
  assert(vim.wait(20000, function() return store_rows() == 2 end, 20), "the plain tag did not reach the store")

  vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/code.py"))
  attached(0)
  results.answer = "Write add()"
  apply("Tag selection as good…", { start = { 1, 0 }, ["end"] = { 2, 16 } })
  assert(vim.wait(20000, function() return store_rows() == 3 end, 20), "the selection tag did not reach the store")
  results.rows_after_selection = store_rows()

  vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/chat.jsonl"))
  local before = #results.warnings
  vim.cmd("MachineValidate")
  assert(vim.wait(30000, function()
    for i = before + 1, #results.warnings do
      if results.warnings[i]:find("machine: ") then return true end
    end
    for _, m in ipairs(vim.split(vim.fn.execute("messages"), "\n")) do
      if m:find("machine: done") then return true end
    end
    return false
  end, 50), "MachineValidate gave no answer")
  results.messages = vim.fn.execute("messages")
end

local ok, err = pcall(main)
results.ok = ok
results.error = ok and vim.NIL or tostring(err)
vim.fn.writefile({ vim.fn.json_encode(results) }, os.getenv("MACHINE_RESULT"))
vim.cmd("qa!")
