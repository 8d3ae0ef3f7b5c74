--[[
haar's data scheduler on Slurm's burst_buffer/lua plugin (Slurm 22.05 and later).

Job-script directives (burst_buffer.conf: Directive=HAAR):

  #HAAR stage_in  SRC DST [same|into] [spread=GLOB]
                                        before the job starts (it waits in BurstBufferStageIn)
  #HAAR stage_out SRC DST [same|into]   after it ends
  #HAAR persist store|delete LOCATION   after it ends: keep (or remove) node-local data
  #HAAR persist share|unshare LOCATION USER

SRC, DST and LOCATION are haar stage endpoints: NAME:PATH in a dataspace of the haar
configuration, NAME:REQUEST in a store dataspace, or /ABS/PATH. "%j" in them is the job id.
Directives are checked when the job is submitted: a bad one rejects it with a message naming
its line. Every transfer runs `haar stage` under the job owner's uid and gid (setpriv), so the
owner's own permissions decide what may be read and written. A failed stage-in leaves haar's
message as the job's reason; Slurm then holds the job. When no retry can help (haar exits 1:
bad endpoint, request or permission; 2: the source does not exist) the teardown that follows
(burst_buffer.conf: Flags=TeardownFailure) cancels the job, so it ends instead of waiting and
its dependants are cancelled too (--kill-on-invalid-dep); other failures (I/O, a killed
stager) keep it held: `scontrol release` stages again. Teardown removes what the job staged in
(and the sources of its stage-outs) from posix (node-local) dataspaces, except persisted
locations.

Settings: burst_buffer_haar.conf beside this file, `key = value` lines:
  haar    = /usr/local/bin/haar          the haar binary
  config  = /etc/haar/haar.yaml          the haar configuration (its dataspaces: section)
  state   = /var/spool/slurm/haar-stage  per-job state (root-owned; journals owned by users)
  setpriv = /usr/bin/setpriv
  scancel = /usr/bin/scancel
  socket  =                              the node's stage service (`haar stage daemon`); empty:
                                         transfers run in the hook's own process
  service_state = /var/lib/haar/stage    that service's --state
  per_node =                             dataspaces (comma-separated, e.g. `local`) that are on
                                         each compute node: directives staging into or out of
                                         them are left to slurm/haar-node.sh on every node of
                                         the job (Prolog, TaskProlog, Epilog); `state` must then
                                         be on a file system the compute nodes share
With per_node set, the hook writes the job's node-local directives to STATE/JOB/plan (the
owner's) and runs only the others here; each node of the job stages in its share at
allocation (all of it, or with spread=GLOB the matching files of SRC dealt round-robin over
the nodes), reports into STATE/JOB/nodes/, and stages out to DST/NODE when the job ends.
With a stage service, stage_in/stage_out tasks are the service's (ids job<ID>-in-N,
job<ID>-out-N, in the owner's journal there, run under the owner's uid by the service), so
they survive a restart of the service: a retried stage-in resumes the task.
See docs/staging.md.
--]]

local script_dir = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./")

local function read_settings()
	local s = {
		haar = "/usr/local/bin/haar",
		config = "/etc/haar/haar.yaml",
		state = "/var/spool/slurm/haar-stage",
		setpriv = "/usr/bin/setpriv",
		scancel = "/usr/bin/scancel",
		socket = "",
		service_state = "/var/lib/haar/stage",
		per_node = "",
	}
	local f = io.open(script_dir .. "burst_buffer_haar.conf", "r")
	if f then
		for line in f:lines() do
			local k, v = line:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
			if k and not line:match("^%s*#") then
				-- A trailing comment (`key = value   # why`), as docs/staging.md writes them.
				s[k] = (v:gsub("%s+#.*$", ""))
			end
		end
		f:close()
	end
	return s
end

local function quote(s)
	return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function log(fmt, ...)
	if slurm and slurm.log_info then
		slurm.log_info("burst_buffer.lua (haar): " .. fmt, ...)
	end
end

-- Endpoints: NAME:REST or /ABS/PATH, without a `..` component.
local function check_endpoint(e)
	if not (e:match("^[%w_.%-]+:") or e:match("^/")) then
		return "endpoint '" .. e .. "': write NAME:PATH (a dataspace) or an absolute path"
	end
	local path = e:gsub("^[%w_.%-]+:", "")
	for part in path:gmatch("[^/]+") do
		if part == ".." then
			return "endpoint '" .. e .. "': '..' would leave the dataspace"
		end
	end
	return nil
end

--[[
Parses the #HAAR directives of a job script. Returns a list of
{line = N, op = "stage_in"|"stage_out"|"persist", args = {...}}, or nil and a message naming
the line at fault. Pure: no I/O beyond the text it is given.
--]]
function haar_parse_directives(text)
	local out = {}
	local n = 0
	for line in (text .. "\n"):gmatch("([^\n]*)\n") do
		n = n + 1
		local rest = line:match("^#HAAR(.*)$")
		if rest then
			local words = {}
			for w in rest:gmatch("%S+") do
				words[#words + 1] = w
			end
			local where = "line " .. n .. " (" .. line .. "): "
			if rest ~= "" and not rest:match("^%s") then
				return nil, where .. "write '#HAAR OPERATION ...' with a space after #HAAR"
			end
			local op = words[1]
			local args = { unpack(words, 2) }
			if op == "stage_in" or op == "stage_out" then
				local max = (op == "stage_in") and 4 or 3
				if #args < 2 or #args > max then
					return nil, where .. op .. " takes SRC DST [same|into]"
						.. ((op == "stage_in") and " [spread=GLOB]" or "")
				end
				for i = 1, 2 do
					local e = check_endpoint(args[i])
					if e then
						return nil, where .. e
					end
				end
				local seen = {}
				for i = 3, #args do
					local a = args[i]
					local kind = a:match("^spread=") and "spread" or "mapping"
					if seen[kind] then
						return nil, where .. "'" .. a .. "': one " .. kind .. " only"
					end
					seen[kind] = true
					if kind == "spread" then
						if op ~= "stage_in" or a == "spread=" or a:find("/", 1, true) then
							return nil, where .. "'" .. a .. "': spread=GLOB (a file name "
								.. "pattern) is for stage_in only"
						end
					elseif a ~= "same" and a ~= "into" then
						return nil, where .. "mapping '" .. a .. "': use same or into"
					end
				end
			elseif op == "persist" then
				local what = args[1]
				if what == "store" or what == "delete" then
					if #args ~= 2 then
						return nil, where .. "persist " .. what .. " takes LOCATION"
					end
				elseif what == "share" or what == "unshare" then
					if #args ~= 3 then
						return nil, where .. "persist " .. what .. " takes LOCATION USER"
					end
				else
					return nil, where .. "persist takes store, delete, share or unshare"
				end
				local e = check_endpoint(args[2])
				if e then
					return nil, where .. e
				end
			else
				return nil, where .. "unknown operation '" .. tostring(op)
					.. "': use stage_in, stage_out or persist"
			end
			out[#out + 1] = { line = n, op = op, args = args }
		end
	end
	return out
end

local function read_file(path)
	local f = io.open(path, "r")
	if not f then
		return nil
	end
	local t = f:read("*a")
	f:close()
	return t
end

local function job_dir(s, job_id)
	return s.state .. "/" .. job_id
end

-- Runs `haar stage ARGS` as the job's owner; returns true, or false, haar's message and its
-- exit code (nil when it was killed by a signal or could not be run). `where` is the journal
-- (default: the job's own), or "service" for a task of the node's stage service.
local function run_haar(s, job_id, args, where)
	local dir = job_dir(s, job_id)
	local owner = read_file(dir .. "/owner")
	if not owner then
		return false, "no owner recorded for job " .. job_id .. " (setup did not run)"
	end
	local uid, gid = owner:match("^(%d+) (%d+)")
	local cmd = quote(s.setpriv) .. " --reuid=" .. uid .. " --regid=" .. gid
		.. " --clear-groups " .. quote(s.haar) .. " stage --config " .. quote(s.config)
	if where == "service" then
		cmd = cmd .. " --socket " .. quote(s.socket)
	else
		cmd = cmd .. " --journal " .. quote(where or (dir .. "/journal"))
	end
	for _, a in ipairs(args) do
		cmd = cmd .. " " .. quote(a)
	end
	local out = dir .. "/last-output"
	local status, how, code = os.execute(cmd .. " </dev/null >" .. quote(out) .. " 2>&1")
	local text = read_file(out) or ""
	log("job %s: %s -> %s: %s", job_id, cmd, tostring(status), text)
	-- Lua 5.1 (what Slurm 22.05 links): the wait status; 5.2+: true/nil, "exit", code.
	if status == 0 or status == true then
		return true
	end
	local exit_code = nil
	if type(status) == "number" and status % 256 == 0 then
		exit_code = status / 256
	elseif how == "exit" then
		exit_code = code
	end
	local msg = text:match("haar: ([^\n]*)") or text:gsub("%s+$", "")
	if msg == "" then
		msg = "haar stage ended with wait status " .. tostring(status)
			.. " and no message (killed?); release the job to stage again"
	end
	return false, msg, exit_code
end

-- haar stage's exit statuses that no retry can change: 1 (bad endpoint, option or request;
-- permission denied) and 2 (the source does not exist). 3 (I/O, checksum, interrupted) and a
-- killed stager may succeed when staged again.
local function permanent(exit_code)
	return exit_code == 1 or exit_code == 2
end

local function directives_of(job_script)
	local text = read_file(job_script)
	if not text then
		return nil, "cannot read the job script " .. tostring(job_script)
	end
	return haar_parse_directives(text)
end

local function expand(arg, job_id)
	return (arg:gsub("%%j", job_id))
end

-- The dataspace a directive stages on the node: stage_in's DST, stage_out's SRC, persist's
-- LOCATION ("path" for an absolute path).
local function node_side(d)
	local e = (d.op == "stage_in") and d.args[2] or (d.op == "stage_out") and d.args[1]
		or d.args[2]
	return e:match("^([%w_.%-]+):") or "path"
end

-- Whether a directive is left to the compute nodes (burst_buffer_haar.conf: per_node).
local function per_node(s, d)
	for name in s.per_node:gmatch("[^,%s]+") do
		if node_side(d) == name then
			return true
		end
	end
	return false
end

-- A directive's options after its endpoints: its mapping ("same" unless given) and spread.
local function options(d)
	local mapping, spread = nil, nil
	for i = 3, #d.args do
		if d.args[i]:match("^spread=") then
			spread = d.args[i]
		else
			mapping = d.args[i]
		end
	end
	return mapping, spread
end

-- Runs every directive of kind `op` in script order, except those left to the compute
-- nodes; stops at the first failure.
local function run_directives(job_id, job_script, op)
	local s = read_settings()
	local ds, err = directives_of(job_script)
	if not ds then
		return slurm.ERROR, err
	end
	local i = 0
	for _, d in ipairs(ds) do
		if d.op == op and not per_node(s, d) then
			i = i + 1
			local args
			if op == "persist" then
				args = { "persist", d.args[1], expand(d.args[2], job_id) }
				if d.args[3] then
					args[4] = d.args[3]
				end
			else
				local verb = (op == "stage_in") and "in" or "out"
				local id = verb .. "-" .. i
				if s.socket ~= "" then
					id = "job" .. job_id .. "-" .. id
				end
				args = { verb, expand(d.args[1], job_id), expand(d.args[2], job_id),
					"--id", id, "--quiet" }
				local mapping, spread = options(d)
				if spread then
					return slurm.ERROR, "#HAAR " .. op .. " " .. table.concat(d.args, " ")
						.. ": " .. spread .. " deals files over the job's nodes: stage into a "
						.. "per_node dataspace (burst_buffer_haar.conf)"
				end
				if mapping then
					args[#args + 1] = "--mapping"
					args[#args + 1] = mapping
				end
			end
			local where = nil
			if op ~= "persist" and s.socket ~= "" then
				where = "service"
			end
			local ok, msg, exit_code = run_haar(s, job_id, args, where)
			if not ok then
				-- Named by its text: Slurm hands the stage functions a rewritten script,
				-- whose line numbers are not the user's.
				local reason = "#HAAR " .. op .. " " .. table.concat(d.args, " ") .. ": " .. msg
				if op == "stage_in" and permanent(exit_code) then
					-- Read by the teardown Slurm runs next (Flags=TeardownFailure), which
					-- ends the job: the hook itself must not call back into slurmctld
					-- while its stage-in thread waits for it.
					local f = io.open(job_dir(s, job_id) .. "/failed", "w")
					if f then
						f:write(reason .. "\n")
						f:close()
					end
				end
				return slurm.ERROR, reason
			end
		end
	end
	return slurm.SUCCESS
end

-- At submission (fast, in slurmctld): parse and validate only.
function slurm_bb_job_process(job_script, uid, gid)
	local ds, err = directives_of(job_script)
	if not ds then
		return slurm.ERROR, "#HAAR " .. err
	end
	return slurm.SUCCESS
end

-- No pools: haar stages into node-local dataspaces, which Slurm does not need to count.
function slurm_bb_pools()
	return slurm.SUCCESS
end

-- While pending: the job's state directory, its owner, and a journal the owner writes.
function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script)
	local s = read_settings()
	local dir = job_dir(s, job_id)
	-- journal: the owner's transfers here; nodes: each compute node's stage-in report,
	-- written as the owner (per_node).
	local rc = os.execute("mkdir -p " .. quote(dir .. "/journal") .. " " .. quote(dir .. "/nodes")
		.. " && chmod 0755 " .. quote(dir) .. " && chown " .. quote(uid .. ":" .. gid) .. " "
		.. quote(dir .. "/journal") .. " " .. quote(dir .. "/nodes") .. " && chmod 0700 "
		.. quote(dir .. "/journal") .. " " .. quote(dir .. "/nodes"))
	if not (rc == 0 or rc == true) then
		return slurm.ERROR, "haar: cannot create " .. dir
	end
	local f = io.open(dir .. "/owner", "w")
	if not f then
		return slurm.ERROR, "haar: cannot write " .. dir .. "/owner"
	end
	f:write(uid .. " " .. gid .. "\n")
	f:close()
	-- The persist registries are root's to make (a user's `#HAAR persist` is refused in a
	-- dataspace without one, docs/design.md §13.4); made once, kept: a failure here shows up,
	-- with what to do, in the job's persist directive instead.
	os.execute(quote(s.haar) .. " stage --config " .. quote(s.config)
		.. " persist init >/dev/null 2>&1")
	return slurm.SUCCESS
end

-- The job's node-local directives (per_node), %j expanded, for slurm/haar-node.sh on its
-- compute nodes: STATE/JOB/plan, the owner's (the nodes read it as the owner). Nothing is
-- written for a job without any.
local function write_plan(s, job_id, job_script)
	local ds, err = directives_of(job_script)
	if not ds then
		return false, err
	end
	local lines = {}
	for _, d in ipairs(ds) do
		if per_node(s, d) then
			local words = { d.op }
			for _, a in ipairs(d.args) do
				words[#words + 1] = expand(a, job_id)
			end
			lines[#lines + 1] = table.concat(words, " ")
		end
	end
	if #lines == 0 then
		return true
	end
	local dir = job_dir(s, job_id)
	local owner = read_file(dir .. "/owner") or ""
	local uid, gid = owner:match("^(%d+) (%d+)")
	local f = io.open(dir .. "/plan", "w")
	if not (f and uid) then
		return false, "cannot write " .. dir .. "/plan"
	end
	f:write("# job " .. job_id .. ": its node-local #HAAR directives (burst_buffer.lua)\n")
	f:write(table.concat(lines, "\n") .. "\n")
	f:close()
	os.execute("chown " .. quote(uid .. ":" .. gid) .. " " .. quote(dir .. "/plan")
		.. " && chmod 0600 " .. quote(dir .. "/plan"))
	return true
end

function slurm_bb_data_in(job_id, job_script)
	local s = read_settings()
	if s.per_node ~= "" then
		local ok, err = write_plan(s, job_id, job_script)
		if not ok then
			return slurm.ERROR, "haar: " .. err
		end
	end
	return run_directives(job_id, job_script, "stage_in")
end

function slurm_bb_real_size(job_id)
	return slurm.SUCCESS
end

-- The owner's journal in the node's stage service.
local function service_journal(s, uid)
	return s.service_state .. "/users/" .. uid
end

-- The job's environment: where its stage journal is.
function slurm_bb_paths(job_id, job_script, path_file)
	local s = read_settings()
	local journal = job_dir(s, job_id) .. "/journal"
	-- (Slurm 22.05 passes no uid here: the one setup recorded.)
	local uid = (read_file(job_dir(s, job_id) .. "/owner") or ""):match("^(%d+)")
	if s.socket ~= "" and uid then
		journal = service_journal(s, uid)
	end
	local f = io.open(path_file, "w")
	if f then
		f:write("HAAR_STAGE_JOURNAL=" .. journal .. "\n")
		f:close()
	end
	return slurm.SUCCESS
end

function slurm_bb_pre_run(job_id, job_script)
	return slurm.SUCCESS
end

-- After the job: persist directives (before teardown can remove anything); the per-node
-- ones run in each node's Epilog.
function slurm_bb_post_run(job_id, job_script)
	return run_directives(job_id, job_script, "persist")
end

function slurm_bb_data_out(job_id, job_script)
	return run_directives(job_id, job_script, "stage_out")
end

--[[
After the job, or after a failed stage-in (Flags=TeardownFailure). A stage-in that failed for
good (its `failed` mark) is ended here: by now Slurm has held the job with haar's message as
its reason, and cancelling it keeps that reason (`scontrol show job`: JobState=CANCELLED
Reason=burst_buffer/lua: slurm_bb_data_in: #HAAR stage_in ...). This runs in slurmscriptd with
no slurmctld lock held, so scancel's request is served at once; Slurm's own cancel handling
then queues a second teardown, which finds nothing left to do.
--]]
function slurm_bb_job_teardown(job_id, job_script, hurry)
	local s = read_settings()
	local dir = job_dir(s, job_id)
	local failed = read_file(dir .. "/failed")
	local owner = read_file(dir .. "/owner")
	if owner then
		local ok, msg = run_haar(s, job_id, { "teardown" })
		if not ok then
			log("job %s: teardown: %s", job_id, msg)
		end
		-- This job's tasks in the stage service's journal of its owner.
		local uid = owner:match("^(%d+)")
		local journal = service_journal(s, uid)
		if s.socket ~= "" and os.execute("test -d " .. quote(journal)) == 0 then
			ok, msg = run_haar(s, job_id, { "teardown", "--tasks", "job" .. job_id .. "-" },
				journal)
			if not ok then
				log("job %s: teardown of its service tasks: %s", job_id, msg)
			end
		end
	end
	os.execute("rm -rf " .. quote(dir))
	if failed then
		local cmd = quote(s.scancel) .. " " .. quote(job_id)
		local status = os.execute(cmd .. " </dev/null >/dev/null 2>&1")
		log("job %s: stage-in failed for good (%s): %s -> %s", job_id,
			failed:gsub("%s+$", ""), cmd, tostring(status))
	end
	return slurm.SUCCESS
end

-- `scontrol show bbstat`: the caller's view is Slurm's; haar adds nothing here yet.
function slurm_bb_get_status(...)
	return slurm.SUCCESS, "haar stage: per-job journals under " .. read_settings().state .. "\n"
end
