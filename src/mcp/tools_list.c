/*
 * tools_list.c - what tools/list says of each MCP tool: its description for a model, its
 * input schema, its output schema and its hints.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "sbxd/request.h"

/* ------------------------------------------------------------------------------------ */
/* The tools' descriptions and input schemas: what tools/list says.                      */

/* Which of a request's fields (request.h's table) a tool's input schema lists first. */
enum cmd_fields {
    CMD_NONE,
    CMD_EXECUTE, /* every field /execute takes: run_command */
    CMD_PROCESS, /* mcp_process_keys: start_process */
};

const char *const mcp_process_keys[] = {"command", "argv", "cwd", "env", "timeout_ms", NULL};

#define PATH_PROP(key, what) "\"" key "\":{\"type\":\"string\",\"description\":\"" what "\"}"

/* Each tool: its name, title, description for a model, and the properties of its input
 * schema (cmd: the request's fields first) and the required ones. */
static const struct tool_doc {
    const char *name, *title, *description;
    enum cmd_fields cmd;
    const char *props, *required;
    const char *output;      /* outputSchema: what structuredContent holds */
    const char *annotations; /* hints for clients: read-only, destructive, open world */
} TOOL_DOCS[] = {
    {"run_command", "Run a command",
     "Run a command in the sandbox and wait for it to end. Returns its exit code, stdout and "
     "stderr (each capped: the head is kept and truncation is stated). It runs as an "
     "unprivileged user in the workspace, with a timeout (default 60 s) that kills its whole "
     "process tree. isError is true when it did not exit with code 0: read status (exited, "
     "signaled, timeout, oom, output_limit, failed_to_start, canceled) and stderr. Nothing "
     "persists between calls but files: use run_code for state that lives on, and "
     "start_process for servers and long jobs.",
     CMD_EXECUTE, NULL, NULL,
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"status\""
     ":{\"type\":\"string\"},\"exit_code\":{\"type\":\"integer\"},\"signal\":{\"ty"
     "pe\":[\"integer\",\"null\"]},\"stdout\":{\"type\":\"string\"},\"stderr\":{\""
     "type\":\"string\"},\"encoding\":{\"type\":\"string\"},\"stdout_truncated\":{"
     "\"type\":\"boolean\"},\"stderr_truncated\":{\"type\":\"boolean\"},\"stdout_b"
     "ytes\":{\"type\":\"integer\"},\"stderr_bytes\":{\"type\":\"integer\"},\"time"
     "d_out\":{\"type\":\"boolean\"},\"oom_killed\":{\"type\":\"boolean\"},\"durat"
     "ion_ms\":{\"type\":\"number\"},\"cpu_ms\":{\"type\":\"number\"},\"memory_pea"
     "k_bytes\":{\"type\":\"integer\"},\"queued_ms\":{\"type\":\"number\"},\"error"
     "\":{\"type\":\"string\"}},\"required\":[\"status\",\"exit_code\",\"stdout\","
     "\"stderr\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":true}"},
    {"run_code", "Run code in a live interpreter",
     "Run code in a stateful context: variables, imports and the working directory stay from "
     "one call to the next (a Jupyter kernel for python; a shell session for bash). Returns "
     "stdout, stderr, the value of the last expression as text, images (e.g. matplotlib "
     "figures) as image content, and on an exception its name, value and traceback (isError "
     "true). A timeout interrupts the code; the context survives.",
     CMD_NONE,
     "\"code\":{\"type\":\"string\",\"description\":\"The code to run.\"},"
     "\"language\":{\"type\":\"string\",\"description\":\"python (default), bash, or another "
     "installed kernel's language: its default context is used, made on first use.\"},"
     "\"context\":{\"type\":\"string\",\"description\":\"The id of a context made with POST "
     "/contexts, instead of the language's default one.\"},"
     "\"timeout_ms\":{\"type\":\"integer\",\"minimum\":1}",
     "\"code\"",
     "{\"type\":\"object\",\"properties\":{\"context\":{\"type\":\"string\"},\"sta"
     "tus\":{\"type\":\"string\"},\"execution_count\":{\"type\":\"integer\"},\"std"
     "out\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"},\"text\":{\"typ"
     "e\":[\"string\",\"null\"]},\"images\":{\"type\":\"integer\"},\"images_left_out\":{\"ty"
     "pe\":\"integer\"},\"error\":{\"ty"
     "pe\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"value\":{\""
     "type\":\"string\"},\"traceback\":{\"type\":\"array\",\"items\":{\"type\":\"s"
     "tring\"}}}}},\"required\":[\"context\",\"status\",\"stdout\",\"stderr\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":true}"},
    {"read_file", "Read a file",
     "Read a file of the workspace. UTF-8 text comes back as text, anything else as a base64 "
     "blob. At most 1 MiB (--max-output-bytes) per call: for a larger file, read on with "
     "offset (structuredContent says size, length and eof). With limit, it reads lines: "
     "offset is then the first line (from 1) and limit how many, numbers: true prefixes each "
     "with its number as cat -n does; a part of a large log costs only that part.",
     CMD_NONE,
     PATH_PROP("path",
               "Path relative to the workspace.") ","
                                                  "\"offset\":{\"type\":\"integer\",\"minimum\":0,"
                                                  "\"description\":\"First byte to read "
                                                  "(default 0).\"},"
                                                  "\"length\":{\"type\":\"integer\",\"minimum\":0,"
                                                  "\"description\":\"Bytes to read at most "
                                                  "(default: to the end, within the cap).\"},"
                                                  "\"limit\":{\"type\":\"integer\",\"minimum\":1,"
                                                  "\"description\":\"Lines to read: offset is "
                                                  "then a line number (from 1).\"},"
                                                  "\"numbers\":{\"type\":\"boolean\","
                                                  "\"description\":\"With limit: each line "
                                                  "prefixed with its number and a tab.\"}",
     "\"path\"",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"size\""
     ":{\"type\":\"integer\"},\"offset\":{\"type\":\"integer\"},\"length\":{\"type"
     "\":\"integer\"},\"encoding\":{\"type\":\"string\",\"enum\":[\"utf8\",\"base6"
     "4\"]},\"eof\":{\"type\":\"boolean\"},\"first_line\":{\"type\":\"integer\"},"
     "\"last_line\":{\"type\":\"integer\"}},\"required\":[\"path\",\"size\",\"offs"
     "et\",\"length\",\"encoding\",\"eof\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"edit_file", "Edit a file",
     "Replace exact text in a text file of the workspace: old must occur exactly once (give "
     "enough of the text around it), or set replace_all. Several edits at once go in edits, "
     "each applied to the result of those before, all or none. The write is atomic and keeps "
     "the file's mode; if_match (the etag stat_file gave) refuses the edit when "
     "the file changed since. Answers the new etag and the lines changed. Binary files and "
     "files over 16 MiB are refused.",
     CMD_NONE,
     PATH_PROP("path",
               "Path relative to the workspace.") ","
                                                  "\"old\":{\"type\":\"string\",\"description\":"
                                                  "\"The exact text to replace (not "
                                                  "empty).\"},"
                                                  "\"new\":{\"type\":\"string\",\"description\":"
                                                  "\"Its replacement.\"},"
                                                  "\"replace_all\":{\"type\":\"boolean\","
                                                  "\"description\":\"Replace every occurrence "
                                                  "(default false: old must occur once).\"},"
                                                  "\"edits\":{\"type\":\"array\",\"minItems\":1,"
                                                  "\"items\":{\"type\":\"object\","
                                                  "\"properties\":{\"old\":{\"type\":\"string\"},"
                                                  "\"new\":{\"type\":\"string\"},"
                                                  "\"replace_all\":{\"type\":\"boolean\"}},"
                                                  "\"required\":[\"old\",\"new\"]},"
                                                  "\"description\":\"Several edits instead of "
                                                  "old/new, applied in order, all or none.\"},"
                                                  "\"if_match\":{\"type\":\"string\","
                                                  "\"description\":\"Only if the file is still "
                                                  "this version (an etag).\"}",
     "\"path\"",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"etag\":{"
     "\"type\":\"string\"},\"size\":{\"type\":\"integer\"},\"replacements\":{\"type\":"
     "\"integer\"},\"lines\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
     "\"properties\":{\"start\":{\"type\":\"integer\"},\"end\":{\"type\":\"integer\"}}"
     "}},\"lines_cut\":{\"type\":\"boolean\"}},\"required\":[\"path\",\"etag\",\"size"
     "\",\"replacements\",\"lines\",\"lines_cut\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"idempotentHint\":false,"
     "\"openWorldHint\":false}"},
    {"write_file", "Write a file",
     "Create or replace a file of the workspace with the given content (missing parent "
     "directories are made). The write is atomic: readers see the old content or the new, "
     "never a mixture.",
     CMD_NONE,
     PATH_PROP("path",
               "Path relative to the workspace.") ","
                                                  "\"content\":{\"type\":\"string\","
                                                  "\"description\":\"The file's whole content.\"},"
                                                  "\"encoding\":{\"type\":\"string\",\"enum\":["
                                                  "\"utf8\",\"base64\"],\"description\":\"How "
                                                  "content is given: utf8 text (default) or base64 "
                                                  "for binary data.\"},"
                                                  "\"mode\":{\"type\":\"string\",\"pattern\":\"^0?["
                                                  "0-7]{3}$\",\"description\":\"Permission "
                                                  "bits in octal, e.g. 0755 for a script (default "
                                                  "0644).\"}",
     "\"path\",\"content\"",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"size\""
     ":{\"type\":\"integer\"},\"created\":{\"type\":\"boolean\"}},\"required\":[\""
     "path\",\"size\",\"created\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"idempotentHint\":true,\"o"
     "penWorldHint\":false}"},
    {"list_files", "List a directory",
     "List the entries of a workspace directory (sorted by name), with depth > 1 also those "
     "of its subdirectories. Each entry: path, type (file, directory, symlink, other), size, "
     "mode, modified_at; a symlink to something in the workspace is described by what it "
     "leads to, with symlink true (one that leads out or nowhere: type symlink). At most 1000 "
     "entries (truncated says so).",
     CMD_NONE,
     PATH_PROP(
         "path",
         "Directory relative to the workspace (default: its root).") ","
                                                                     "\"depth\":{\"type\":"
                                                                     "\"integer\",\"minimum\":1,"
                                                                     "\"maximum\":10,"
                                                                     "\"description\":\"Levels "
                                                                     "to list (default 1).\"}",
     NULL,
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"entrie"
     "s\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"pat"
     "h\":{\"type\":\"string\"},\"type\":{\"type\":\"string\"},\"size\":{\"type\":"
     "\"integer\"},\"mode\":{\"type\":\"string\"},\"symlink\":{\"type\":\"boolean\"},"
     "\"modified_at\":{\"type\":[\"str"
     "ing\",\"null\"]}},\"required\":[\"path\",\"type\"]}},\"truncated\":{\"type\""
     ":\"boolean\"}},\"required\":[\"path\",\"entries\",\"truncated\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"delete_file", "Delete a file or directory",
     "Delete a file, a symlink (not what it points to) or an empty directory; with recursive, "
     "a directory and everything in it.",
     CMD_NONE,
     PATH_PROP("path", "Path relative to the workspace.") ","
                                                          "\"recursive\":{\"type\":\"boolean\"}",
     "\"path\"",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"delete"
     "d\":{\"type\":\"boolean\"}},\"required\":[\"path\",\"deleted\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":false}"},
    {"move_file", "Move or rename",
     "Rename a file or directory within the workspace, atomically. An existing destination is "
     "an error unless overwrite is true.",
     CMD_NONE,
     PATH_PROP("from", "Source path relative to the workspace.") "," PATH_PROP(
         "to",
         "Destination path relative to the workspace.") ","
                                                        "\"overwrite\":{\"type\":\"boolean\"}",
     "\"from\",\"to\"",
     "{\"type\":\"object\",\"properties\":{\"from\":{\"type\":\"string\"},\"to\":{"
     "\"type\":\"string\"}},\"required\":[\"from\",\"to\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":false}"},
    {"stat_file", "Describe a file",
     "Describe a workspace entry: type, size, mode, owner, times, a symlink's target. With "
     "follow false a symlink itself is described.",
     CMD_NONE,
     PATH_PROP(
         "path",
         "Path relative to the workspace.") ","
                                            "\"follow\":{\"type\":\"boolean\",\"description\":"
                                            "\"Follow a final symlink (default "
                                            "true).\"}",
     "\"path\"",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"name\""
     ":{\"type\":\"string\"},\"type\":{\"type\":\"string\"},\"size\":{\"type\":\"i"
     "nteger\"},\"mode\":{\"type\":\"string\"},\"uid\":{\"type\":\"integer\"},\"gi"
     "d\":{\"type\":\"integer\"},\"modified_at\":{\"type\":[\"string\",\"null\"]},"
     "\"created_at\":{\"type\":[\"string\",\"null\"]},\"symlink_target\":{\"type\""
     ":\"string\"},\"nlink\":{\"type\":\"integer\"},\"etag\":{\"type\":\"string\"}},\"requ"
     "ired\":[\"path\",\"type\",\"size\",\"mode\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"search_files", "Search file contents",
     "Search the files under a workspace directory for a pattern, as grep -rn does but "
     "without a shell: a literal string by default (quotes, $ and backslashes are "
     "themselves), a PCRE2 regular expression with regex true. Filter files with glob "
     "(comma-separated, e.g. *.py,src/**/*.c), exclude and type (py, c, js, go, rs, md...). "
     ".git and binary files are passed over, symlinks are not followed. Each match: path, "
     "line, column, text and context lines before/after. At most max_results (default 100; "
     "truncated says so).",
     CMD_NONE,
     "\"pattern\":{\"type\":\"string\",\"description\":\"What to look for.\"}," PATH_PROP(
         "path",
         "Directory relative to the workspace (default: its root).") ","
                                                                     "\"regex\":{\"type\":"
                                                                     "\"boolean\",\"description\":"
                                                                     "\"pattern is a PCRE2 regular "
                                                                     "expression (default false: a "
                                                                     "literal).\"},"
                                                                     "\"ignore_case\":{\"type\":"
                                                                     "\"boolean\"},"
                                                                     "\"glob\":{\"type\":"
                                                                     "\"string\",\"description\":"
                                                                     "\"Files to search, "
                                                                     "comma-separated globs "
                                                                     "(one without / matches the "
                                                                     "file name).\"},"
                                                                     "\"exclude\":{\"type\":"
                                                                     "\"string\",\"description\":"
                                                                     "\"Files and directories to "
                                                                     "pass over, "
                                                                     "comma-separated globs.\"},"
                                                                     "\"type\":{\"type\":"
                                                                     "\"string\",\"description\":"
                                                                     "\"A file type: c, cpp, css, "
                                                                     "go, html, "
                                                                     "java, js, json, md, py, rb, "
                                                                     "rs, sh, ts, txt, yaml.\"},"
                                                                     "\"context\":{\"type\":"
                                                                     "\"integer\",\"minimum\":0,"
                                                                     "\"maximum\":5,"
                                                                     "\"description\":\"Lines "
                                                                     "before and after each "
                                                                     "match.\"},"
                                                                     "\"max_results\":{\"type\":"
                                                                     "\"integer\",\"minimum\":1,"
                                                                     "\"maximum\":1000},"
                                                                     "\"binary\":{\"type\":"
                                                                     "\"boolean\",\"description\":"
                                                                     "\"Search binary files "
                                                                     "too.\"},"
                                                                     "\"include_git\":{\"type\":"
                                                                     "\"boolean\",\"description\":"
                                                                     "\"Search .git too.\"}",
     "\"pattern\"",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"matches\":{\"type\":"
     "\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},"
     "\"line\":{\"type\":\"integer\"},\"column\":{\"type\":\"integer\"},\"text\":{\"type\":"
     "\"string\"},\"before\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"after\":{"
     "\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"path\",\"line\","
     "\"column\",\"text\"]}},\"files_scanned\":{\"type\":\"integer\"},\"bytes_read\":{\"type\":"
     "\"integer\"},\"skipped_unreadable\":{\"type\":\"integer\"},\"truncated\":{\"type\":"
     "\"boolean\"}},\"required\":[\"path\",\"matches\",\"files_scanned\",\"truncated\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"find_files", "Find files by name",
     "Find the entries under a workspace directory whose path matches a glob: **/*.py (any "
     "depth), src/*.c, *.md (a glob without / matches the name at any depth). Each: path, "
     "type, size. .git is passed over, symlinks are listed, not followed. At most "
     "max_results (default 100; truncated says so).",
     CMD_NONE,
     "\"pattern\":{\"type\":\"string\",\"description\":\"Globs, comma-separated.\"}," PATH_PROP(
         "path",
         "Directory relative to the workspace (default: its root).") ","
                                                                     "\"exclude\":{\"type\":"
                                                                     "\"string\",\"description\":"
                                                                     "\"Globs to pass over "
                                                                     "(comma-separated).\"},"
                                                                     "\"type\":{\"type\":"
                                                                     "\"string\",\"description\":"
                                                                     "\"A file type (py, c, js...) "
                                                                     "its globs "
                                                                     "add to pattern.\"},"
                                                                     "\"max_results\":{\"type\":"
                                                                     "\"integer\",\"minimum\":1,"
                                                                     "\"maximum\":1000},"
                                                                     "\"include_git\":{\"type\":"
                                                                     "\"boolean\"}",
     "\"pattern\"",
     "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"entries\":{\"type\":"
     "\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},"
     "\"type\":{\"type\":\"string\"},\"size\":{\"type\":\"integer\"}},\"required\":[\"path\","
     "\"type\",\"size\"]}},\"files_scanned\":{\"type\":\"integer\"},\"bytes_read\":{\"type\":"
     "\"integer\"},\"skipped_unreadable\":{\"type\":\"integer\"},\"truncated\":{\"type\":"
     "\"boolean\"}},\"required\":[\"path\",\"entries\",\"truncated\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"start_process", "Start a background process",
     "Start a long-running command (a server, a build, a watcher) and return at once with its "
     "id. Read its output with process_output, write to its stdin with send_input, end it "
     "with kill_process. Its timeout defaults to the longest allowed.",
     CMD_PROCESS, NULL, NULL,
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"pid\":{\""
     "type\":\"integer\"}},\"required\":[\"id\",\"pid\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":true}"},
    {"process_output", "Read a process's output",
     "Output of a background process from offset (default 0; pass the next_offset of the last "
     "call to read on), waiting up to wait_ms for some when there is none yet. Says whether "
     "it still runs, and its exit code once it ended.",
     CMD_NONE,
     "\"id\":{\"type\":\"string\",\"description\":\"The id start_process returned.\"},"
     "\"offset\":{\"type\":\"integer\",\"minimum\":0},"
     "\"wait_ms\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":30000}",
     "\"id\"",
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"running\""
     ":{\"type\":\"boolean\"},\"status\":{\"type\":\"string\"},\"exit_code\":{\"ty"
     "pe\":[\"integer\",\"null\"]},\"output\":{\"type\":\"string\"},\"stderr\":{\""
     "type\":\"string\"},\"offset\":{\"type\":\"integer\"},\"next_offset\":{\"type"
     "\":\"integer\"},\"dropped_bytes\":{\"type\":\"integer\"}},\"required\":[\"id"
     "\",\"running\",\"status\",\"output\",\"next_offset\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"send_input", "Write to a process's stdin",
     "Write text to a background process's standard input; with eof true its stdin is then "
     "closed.",
     CMD_NONE,
     "\"id\":{\"type\":\"string\"},\"data\":{\"type\":\"string\"},"
     "\"eof\":{\"type\":\"boolean\"}",
     "\"id\"",
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"written\""
     ":{\"type\":\"integer\"},\"stdin_open\":{\"type\":\"boolean\"}},\"required\":"
     "[\"id\",\"written\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":true}"},
    {"kill_process", "Signal a process",
     "Send a signal to a background process's whole tree: SIGKILL (default), SIGTERM, SIGINT, "
     "SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT or SIGSTOP.",
     CMD_NONE, "\"id\":{\"type\":\"string\"},\"signal\":{\"type\":\"string\"}", "\"id\"",
     "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"signal\""
     ":{\"type\":\"string\"}},\"required\":[\"id\",\"signal\"]}",
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":true}"},
    {"sandbox_usage", "Sandbox resource usage",
     "How full the sandbox is: CPUs available and the percentage used over the last interval, "
     "memory used and its limit (from the sandbox's cgroup where it has one, else the "
     "machine's), disk used and total of the workspace and /tmp, and the commands, background "
     "processes and contexts running. Check it before a heavy build or when commands fail "
     "for want of memory or space.",
     CMD_NONE, "", NULL,
     "{\"type\":\"object\",\"properties\":{\"cpu_count\":{\"type\":\"integer\"},"
     "\"cpu_limit\":{\"type\":[\"number\",\"null\"]},\"cpu_used_pct\":{\"type\":\"number\"},"
     "\"cpu_interval_ms\":{\"type\":\"integer\"},\"cpu_source\":{\"type\":\"string\"},"
     "\"mem_used\":{\"type\":\"integer\"},\"mem_total\":{\"type\":\"integer\"},"
     "\"memory_source\":{\"type\":\"string\"},\"disk_used\":{\"type\":\"integer\"},"
     "\"disk_total\":{\"type\":\"integer\"},\"disks\":{\"type\":\"array\",\"items\":{"
     "\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"path\":{"
     "\"type\":\"string\"},\"used\":{\"type\":[\"integer\",\"null\"]},\"total\":{\"type"
     "\":[\"integer\",\"null\"]},\"free\":{\"type\":[\"integer\",\"null\"]}}}},"
     "\"commands_running\":{\"type\":\"integer\"},\"processes_running\":{\"type\":\"in"
     "teger\"},\"contexts\":{\"type\":\"integer\"},\"ts\":{\"type\":\"integer\"}},\"requi"
     "red\":[\"cpu_count\",\"cpu_used_pct\",\"mem_used\",\"mem_total\",\"disk_used\",\"dis"
     "k_total\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"list_ports", "List listening ports",
     "The TCP ports something listens on in the sandbox (IPv4 and IPv6): address, whether only "
     "the sandbox itself can reach it (loopback), the owning uid, the process holding it and "
     "the background process (start_process id) it belongs to, and whether expose_port can "
     "hand it to a person (why not, when not: sbxd's own ports, root's, a code context's "
     "kernel).",
     CMD_NONE, "", NULL,
     "{\"type\":\"object\",\"properties\":{\"ports\":{\"type\":\"array\",\"items\":"
     "{\"type\":\"object\",\"properties\":{\"address\":{\"type\":\"string\"},"
     "\"port\":{\"type\":\"integer\"},\"family\":{\"type\":\"string\"},\"loopback\":{"
     "\"type\":\"boolean\"},\"uid\":{\"type\":\"integer\"},\"pid\":{\"type\":[\"integer\","
     "\"null\"]},\"command\":{\"type\":[\"string\",\"null\"]},\"process_id\":{\"type\":"
     "[\"string\",\"null\"]},\"sbxd\":{\"type\":\"boolean\"},\"proxy\":{\"type\":\"boo"
     "lean\"},\"why\":{\"type\":\"string\"}},\"required\":[\"address\",\"port\",\"proxy\"]}"
     "}},\"required\":[\"ports\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
    {"expose_port", "Expose a port to a person",
     "Where a person can open what a command serves on port (a dev server, a notebook, a web "
     "app started with start_process and bound to 127.0.0.1 or 0.0.0.0): sbxd's proxy path "
     "/proxy/PORT/, and the full URL when sbxd knows its public address (--public-url). The "
     "proxy carries HTTP and WebSockets, and keeps the app's redirects and cookies under the "
     "path. Fails when nothing listens there or the port is not a command's.",
     CMD_NONE, "\"port\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":65535}", "\"port\"",
     "{\"type\":\"object\",\"properties\":{\"port\":{\"type\":\"integer\"},\"path\":{"
     "\"type\":\"string\"},\"url\":{\"type\":[\"string\",\"null\"]}},\"required\":[\"port"
     "\",\"path\",\"url\"]}",
     "{\"readOnlyHint\":true,\"openWorldHint\":false}"},
};

/* Whether the tool's schema lists field f of a request. */
static bool cmd_takes(enum cmd_fields cmd, const struct exec_field *f)
{
    if (cmd == CMD_EXECUTE)
        return !f->background_only;
    for (int i = 0; cmd == CMD_PROCESS && mcp_process_keys[i]; i++)
        if (strcmp(f->name, mcp_process_keys[i]) == 0)
            return true;
    return false;
}

/* The properties of the request's fields the tool takes, from the table the parser takes
 * them by: whether there were any. */
static bool cmd_props(struct jsonw *w, enum cmd_fields cmd)
{
    bool any = false;
    for (const struct exec_field *f = exec_request_fields; f->name; f++) {
        if (!cmd_takes(cmd, f))
            continue;
        if (any)
            jw_raw(w, ",", 1);
        any = true;
        w->need_comma = false;
        jw_key(w, f->name);
        jw_raw(w, "{", 1);
        jw_raw(w, f->schema, strlen(f->schema));
        jw_raw(w, ",", 1);
        w->need_comma = false;
        jw_key(w, "description");
        jw_str(w, f->doc);
        jw_raw(w, "}", 1);
    }
    return any;
}

static char *tools_json;
static size_t tools_json_len;
static pthread_once_t tools_once = PTHREAD_ONCE_INIT;

static void tools_make(void)
{
    struct jsonw w;
    jw_init(&w, 8192);
    jw_obj_begin(&w);
    jw_key(&w, "tools");
    jw_arr_begin(&w);
    for (size_t i = 0; i < sizeof(TOOL_DOCS) / sizeof(TOOL_DOCS[0]); i++) {
        const struct tool_doc *d = &TOOL_DOCS[i];
        jw_obj_begin(&w);
        jw_key(&w, "name");
        jw_str(&w, d->name);
        jw_key(&w, "title");
        jw_str(&w, d->title);
        jw_key(&w, "description");
        jw_str(&w, d->description);
        jw_key(&w, "inputSchema");
        static const char head[] = "{\"type\":\"object\",\"properties\":{";
        static const char req[] = ",\"required\":[";
        jw_raw(&w, head, sizeof(head) - 1);
        if (cmd_props(&w, d->cmd) && d->props)
            jw_raw(&w, ",", 1);
        if (d->props)
            jw_raw(&w, d->props, strlen(d->props));
        jw_raw(&w, "}", 1);
        if (d->required) {
            jw_raw(&w, req, sizeof(req) - 1);
            jw_raw(&w, d->required, strlen(d->required));
            jw_raw(&w, "]", 1);
        }
        jw_raw(&w, "}", 1);
        w.need_comma = true;
        jw_key(&w, "outputSchema");
        jw_json(&w, d->output, strlen(d->output));
        jw_key(&w, "annotations");
        jw_json(&w, d->annotations, strlen(d->annotations));
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    tools_json = jw_finish(&w, &tools_json_len);
    jw_free(&w);
}

const char *mcp_tools_list(size_t *len)
{
    pthread_once(&tools_once, tools_make);
    *len = tools_json ? tools_json_len : 12;
    return tools_json ? tools_json : "{\"tools\":[]}";
}
