/*
 * sbx.c - sbx, the command-line client of sbxd: main, the global options, the command table
 * (which also makes the help) and --version.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sbx.h"

#define EXIT_STATUS_HELP                                                                           \
    "Exit status: 0 on success; 125 when sbx fails: sbxd refused (its message is printed),\n"      \
    "the operation failed, sbxd cannot be reached, or a usage error.\n"

static const struct sbx_cmd commands[] = {
    {"exec", "[OPTIONS] [--] CMD [ARG]...", "Run a program with its arguments, without a shell",
     "CMD runs with its arguments exactly as given (no shell: * $ | ; mean nothing special), in\n"
     "the sandbox's workspace. Its stdout and stderr come out on sbx's own, byte for byte, and\n"
     "sbx exits with its exit status. Options go before CMD; '--' ends them.\n"
     "\n"
     "Options:\n"
     "  -t, --timeout DURATION  wall-clock limit in milliseconds, or with s or m (10s, 2m);\n"
     "                          default: sbxd's (--timeout-ms); then the command is killed\n"
     "  -e, --env NAME=VALUE    set an environment variable (repeatable); commands start\n"
     "                          with PATH, HOME and LANG only\n"
     "  -C, --cwd DIR           run in DIR, relative to the workspace (default: its root)\n"
     "  -s, --stream            write the output as it is printed, not when the command has\n"
     "                          ended; and all of it (sbxd keeps the first 1 MiB of each\n"
     "                          stream otherwise, and sbx says when it was cut)\n"
     "  -i, --stdin             send sbx's stdin to the command (text, no NUL bytes; read to\n"
     "                          its end first); without it the command's stdin is empty\n"
     "      --no-network        the command can open Unix sockets only (no IP, netlink...)\n"
     "  -h, --help              show this help\n"
     "\n"
     "A command that does not simply exit gets one line on stderr: 'sbx: command timed out\n"
     "after N ms', 'sbx: command killed by SIGKILL', '... out of memory', '... failed to\n"
     "start: ...'.\n"
     "\n"
     "Exit status: the command's (128+N after signal N, so 137 after a timeout; 127 when it\n"
     "could not start); 125 when sbx itself fails: sbxd refused the request or cannot be\n"
     "reached, or a usage error (as docker run and env use 125). sbx's own errors are the\n"
     "stderr lines that start with 'sbx:'.\n"
     "\n"
     "Examples:\n"
     "  sbx exec -- ls -la\n"
     "  sbx exec --cwd src --env DEBUG=1 -- make -j4\n"
     "  sbx exec --stream --timeout 30m -- ./build.sh\n"
     "  printf 'a\\nb\\n' | sbx exec --stdin -- wc -l\n",
     cmd_exec},
    {"run", "[OPTIONS] [--] 'SHELL COMMAND'", "Run a shell command line (/bin/sh -c)",
     "The one argument is a shell command line: pipes, redirections, variables and globs work,\n"
     "as in 'sh -c'. Quote it so that your own shell passes it on unchanged. Everything else\n"
     "is as for 'sbx exec': the output byte for byte, the command's exit status.\n"
     "\n"
     "Options:\n"
     "  -t, --timeout DURATION  wall-clock limit in milliseconds, or with s or m (10s, 2m)\n"
     "  -e, --env NAME=VALUE    set an environment variable (repeatable)\n"
     "  -C, --cwd DIR           run in DIR, relative to the workspace\n"
     "  -s, --stream            write the output as it is printed (and all of it)\n"
     "  -i, --stdin             send sbx's stdin to the command (text, no NUL bytes)\n"
     "      --no-network        the command can open Unix sockets only (no IP, netlink...)\n"
     "  -h, --help              show this help\n"
     "\n"
     "Exit status: the command's; 125 when sbx itself fails: sbxd refused the request or\n"
     "cannot be reached, or a usage error.\n"
     "\n"
     "Examples:\n"
     "  sbx run 'echo $HOME; ls | wc -l'\n"
     "  sbx run --stream 'make 2>&1 | tee build.log'\n"
     "  sbx run --timeout 5s 'sleep 10' || echo \"ended with $?\"\n",
     cmd_run},
    {"put", "[--mode MODE] LOCAL [REMOTE] | -r DIR [REMOTE]",
     "Upload a file, or a whole directory, into the workspace",
     "Streams LOCAL to REMOTE in the workspace: never read whole into memory, written by sbxd\n"
     "to a temporary file and renamed, so readers see the old content or the new. Missing\n"
     "parent directories are created. LOCAL '-' reads stdin (then REMOTE is needed). REMOTE\n"
     "omitted: LOCAL's name in the workspace root; REMOTE ending in '/': LOCAL's name in that\n"
     "directory. A progress bar shows on stderr for files of 1 MiB or more when stderr is a\n"
     "terminal.\n"
     "\n"
     "With -r, DIR's tree goes as one tar stream (made by the local tar) that sbxd extracts\n"
     "into REMOTE (default: DIR's name in the workspace root) all or nothing: a new directory\n"
     "appears whole, an existing one gets the tree merged in (files of the same name\n"
     "replaced), or with --replace becomes exactly DIR's tree. Symbolic links are sent as\n"
     "links; sbxd refuses links that leave the workspace, devices and setuid files.\n"
     "\n"
     "Options:\n"
     "  -m, --mode MODE  the file's permissions in octal, like 0755 (default: sbxd's, 0644)\n"
     "  -r, --recursive  upload the directory DIR and everything in it\n"
     "      --replace    with -r: REMOTE becomes DIR's tree (what else it held goes)\n"
     "  -h, --help       show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx put data.csv in/data.csv\n"
     "  sbx put build.sh scripts/ --mode 0755\n"
     "  tar c src | sbx put - src.tar\n"
     "  sbx put -r ./project repo\n",
     cmd_put},
    {"get", "[--lines RANGE [-n]] REMOTE [LOCAL] | -r DIR [LOCAL]",
     "Download a file, or a whole directory, from the "
     "workspace",
     "Writes REMOTE to LOCAL: by default REMOTE's name in the current directory; into it when\n"
     "LOCAL is a directory; to stdout when LOCAL is '-'. The download goes to a file without a\n"
     "name that gets LOCAL's only once complete: a failed or interrupted download leaves no\n"
     "partial file, and an existing LOCAL is replaced in one step. A progress bar shows on\n"
     "stderr for files of 1 MiB or more when stderr is a terminal.\n"
     "\n"
     "With -r, the workspace directory DIR comes as one tar stream that the local tar extracts\n"
     "into LOCAL (default: DIR's name here; made when missing) as it arrives: a download that\n"
     "fails part-way may leave part of the tree.\n"
     "\n"
     "With --lines, only lines START:END of the text file REMOTE come (1-based, inclusive;\n"
     "START: to the end, :END from the start, a negative number counts from the end), to\n"
     "stdout unless LOCAL is given, read by sbxd without sending the rest.\n"
     "\n"
     "Options:\n"
     "  -r, --recursive    download the directory DIR and everything in it\n"
     "  -l, --lines RANGE  only lines RANGE (START:END) of a text file\n"
     "  -n, --numbers      with --lines: each line prefixed with its number, as cat -n\n"
     "  -h, --help         show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx get -r repo ./repo-copy\n"
     "  sbx get out/report.pdf\n"
     "  sbx get logs/build.log /tmp/\n"
     "  sbx get results.json - | jq .\n"
     "  sbx get --lines -20: logs/build.log\n",
     cmd_get},
    {"edit", "[--all] [--if-match ETAG] PATH OLD NEW | PATH -",
     "Replace exact text in a workspace file",
     "Replaces OLD with NEW in the workspace file PATH, exactly (no pattern, no shell quoting\n"
     "beyond the arguments'): OLD must occur once, or every occurrence is replaced with --all.\n"
     "With '-' instead of OLD NEW, the request comes as JSON on stdin: {\"old\", \"new\",\n"
     "\"replace_all\"}, or {\"edits\": [...]} to make several edits, all or none. The file is\n"
     "rewritten atomically and keeps its mode; a binary file or one over 16 MiB is refused.\n"
     "Prints how many replacements were made and the lines of the new file they are on.\n"
     "\n"
     "Options:\n"
     "  -a, --all            replace every occurrence of OLD\n"
     "  -m, --if-match ETAG  only if the file is still the version ETAG names (HTTP 412\n"
     "                       otherwise); the ETag of a 'sbx get' is sbxd's ETag header\n"
     "  -j, --json           print sbxd's answer (etag, replacements, lines) as JSON\n"
     "  -h, --help           show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx edit app.py 'DEBUG = True' 'DEBUG = False'\n"
     "  sbx edit --all src/util.c old_name new_name\n"
     "  echo '{\"edits\":[{\"old\":\"a\",\"new\":\"b\"},{\"old\":\"c\",\"new\":\"d\"}]}' | sbx "
     "edit f.txt -\n",
     cmd_edit},
    {"ls", "[PATH]", "List a directory of the workspace, or show a file",
     "One line per entry, sorted by name: permissions (octal), size in bytes, modification\n"
     "time (UTC), name, with '/' after a directory and '@' after a symbolic link. A file\n"
     "gives its own line. PATH defaults to the workspace root; names with control characters\n"
     "are shown escaped (\\n, \\t, \\xNN).\n"
     "\n"
     "Options:\n"
     "  -h, --help  show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx ls\n"
     "  sbx ls src/lib\n"
     "  sbx ls out/report.pdf\n",
     cmd_ls},
    {"rm", "[-r] [-f] PATH...", "Delete files or directories of the workspace",
     "Deletes each PATH: a file, a symbolic link (never its target) or an empty directory;\n"
     "a directory with its content with -r. Every PATH is tried; the exit status says whether\n"
     "all were deleted.\n"
     "\n"
     "Options:\n"
     "  -r, -R, --recursive  delete directories and everything in them\n"
     "  -f, --force          a PATH that does not exist is not an error\n"
     "  -h, --help           show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx rm old.log\n"
     "  sbx rm -r build\n"
     "  sbx rm -rf cache tmp\n",
     cmd_rm},
    {"mkdir", "PATH...", "Create directories, with their parents",
     "Creates each PATH and any missing parent (as 'mkdir -p' does; -p is accepted). A\n"
     "directory that exists already is fine; a file in the way is an error.\n"
     "\n"
     "Options:\n"
     "  -h, --help  show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx mkdir in out/logs\n",
     cmd_mkdir},
    {"grep", "[OPTIONS] PATTERN [DIR]", "Search the contents of the workspace's files",
     "Searches the files under DIR (default: the workspace root) for PATTERN, inside the\n"
     "sandbox (GET /files/DIR?grep=), and prints each matching line as grep -rn does:\n"
     "PATH:LINE:TEXT, context lines as PATH-LINE-TEXT. PATTERN is a literal string unless -E\n"
     "(a PCRE2 regular expression). .git directories and binary files (a NUL in their first\n"
     "block) are passed over; symbolic links are not followed. Lines over 2048 bytes are cut.\n"
     "\n"
     "Options:\n"
     "  -E, --regex           PATTERN is a regular expression (PCRE2)\n"
     "  -i, --ignore-case     fold case\n"
     "  -g, --glob GLOBS      only files matching these globs (comma-separated; one without\n"
     "                        '/' matches the file name: *.py, src/**/*.c)\n"
     "  -x, --exclude GLOBS   pass over these files and directories\n"
     "  -t, --type TYPE       only files of TYPE: c, cpp, css, go, html, java, js, json, md,\n"
     "                        py, rb, rs, sh, ts, txt, yaml\n"
     "  -C, --context N       N lines before and after each match (at most 20)\n"
     "  -m, --max N           stop after N matches (default 1000; a line on stderr says so)\n"
     "  -a, --binary          search binary files too\n"
     "  -G, --include-git     search .git too\n"
     "  -j, --json            print sbxd's events (NDJSON) as they come\n"
     "  -h, --help            show this help\n"
     "\n"
     "Exit status: 0 when something matched, 1 when nothing did, 125 when sbx fails (sbxd\n"
     "refused, e.g. a bad regular expression, or cannot be reached).\n"
     "\n"
     "Examples:\n"
     "  sbx grep TODO\n"
     "  sbx grep -t py -C 2 'def main' src\n"
     "  sbx grep -E -i '^import (os|sys)$' -x 'vendor,node_modules'\n",
     cmd_grep},
    {"find", "[OPTIONS] GLOB [DIR]", "Find the workspace's files by name",
     "Prints the path of every entry under DIR (default: the workspace root) that GLOB\n"
     "matches (GET /files/DIR?glob=): '**' spans directories, '*' stays within one, and a\n"
     "glob without '/' matches the name at any depth. Several globs are comma-separated.\n"
     ".git is passed over; symbolic links are listed, not followed.\n"
     "\n"
     "Options:\n"
     "  -x, --exclude GLOBS   pass over these files and directories\n"
     "  -t, --type TYPE       add the globs of a file type (py, c, js...)\n"
     "  -m, --max N           stop after N entries (default 1000)\n"
     "  -l, --long            type and size before each path\n"
     "  -G, --include-git     look in .git too\n"
     "  -j, --json            print sbxd's events (NDJSON) as they come\n"
     "  -h, --help            show this help\n"
     "\n"
     "Exit status: 0 when something was found, 1 when nothing was, 125 when sbx fails.\n"
     "\n"
     "Examples:\n"
     "  sbx find '**/*.py'\n"
     "  sbx find -l '*.log' logs\n",
     cmd_find},
    {"code", "[OPTIONS] CODE | -", "Run code in a persistent context (Python, a shell session)",
     "Runs CODE (or the code on stdin, for '-') in a context whose state lasts from one run to\n"
     "the next: a Jupyter kernel (python: variables, imports, loaded data) or a shell session\n"
     "(bash, sh: working directory, variables, functions, aliases). Without --context it is\n"
     "the default context of LANG, which sbxd makes on first use and keeps (until\n"
     "--context-idle-s without use). The output comes out as it is printed: stdout on stdout,\n"
     "stderr on stderr; a kernel's results (the value of the last line, what display() shows)\n"
     "as text on stdout, its images saved with --save-images, an error's traceback on stderr.\n"
     "\n"
     "Options:\n"
     "  -l, --language LANG     bash (the default), sh, or a kernel's language: python, ...\n"
     "                          (GET /kernels lists those installed)\n"
     "  -c, --context ID        a context made with POST /contexts (see 'sbx contexts')\n"
     "  -t, --timeout DURATION  interrupt the code after this long (milliseconds, or 10s,\n"
     "                          2m); the context and its state stay\n"
     "  -s, --save-images DIR   save the images of results and displays (charts) in DIR as\n"
     "                          image-N.png (.jpg, .gif, .svg), a line on stderr naming each\n"
     "  -h, --help              show this help\n"
     "\n"
     "Exit status: a shell's, the code's own (its last command's; 130 after an interrupt, with\n"
     "a line on stderr); a kernel's, 0 when the code ran without an error, else 1; 125 when sbx\n"
     "fails (sbxd refused, cannot be reached, a usage error) or the context died (the code\n"
     "ended its shell or kernel).\n"
     "\n"
     "Examples:\n"
     "  sbx code 'cd src && export MODE=fast'\n"
     "  sbx code 'pwd; echo $MODE'               # src, fast\n"
     "  sbx code -t 30s - < setup.sh\n"
     "  sbx code -l python 'import pandas as pd; df = pd.read_csv(\"data.csv\"); df.shape'\n"
     "  sbx code -l python -s charts 'df.plot()'\n",
     cmd_code},
    {"contexts", "[rm ID...]", "List or delete contexts",
     "Without arguments, one line per context, oldest first: its id, language, the pid of its\n"
     "shell, its state (idle, busy, dead), how many runs it has had and when it was last used\n"
     "(UTC). 'rm ID...' deletes contexts: everything they run is killed.\n"
     "\n"
     "Options:\n"
     "  -h, --help  show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx contexts\n"
     "  sbx contexts rm 573266a705b8c5a4465b56fd\n",
     cmd_contexts},
    {"ps", "", "List background processes",
     "One line per background process (started with POST /processes), running and recently\n"
     "ended, oldest first: its id, pid, status (running, exited, signaled, timeout, ...), exit\n"
     "status once ended, start time (UTC) and command.\n"
     "\n"
     "Options:\n"
     "  -h, --help  show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx ps\n",
     cmd_ps},
    {"logs", "[-f] ID", "Print the output of a background process",
     "Writes what process ID printed, byte for byte, from the start of what sbxd still holds\n"
     "(the last 4 MiB by default; sbx says on stderr when older output was dropped): stdout\n"
     "and terminal output to stdout, stderr to stderr. Without -f it ends with what is there\n"
     "now; with -f it goes on as the process prints and ends when the process ends.\n"
     "\n"
     "Options:\n"
     "  -f, --follow  keep printing output as it comes, until the process ends\n"
     "  -h, --help    show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx logs 5f0c1e2d3c4b5a69788796a5\n"
     "  sbx logs -f 5f0c1e2d3c4b5a69788796a5 | grep -m1 'listening'\n",
     cmd_logs},
    {"kill", "[-s SIGNAL] ID...", "Send a signal to a background process",
     "Sends SIGNAL (default TERM) to the whole process tree of each process ID. sbxd sends\n"
     "HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT and STOP; SIGNAL is a name, with or without\n"
     "SIG, in any case, or its number (1 2 3 9 10 12 15 18 19 on x86 and arm). kill(1)'s\n"
     "forms '-9' and '-KILL' work too.\n"
     "\n"
     "Options:\n"
     "  -s, --signal SIGNAL  the signal to send (default: TERM)\n"
     "  -h, --help           show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx kill 5f0c1e2d3c4b5a69788796a5\n"
     "  sbx kill -s INT 5f0c1e2d3c4b5a69788796a5\n"
     "  sbx kill -9 5f0c1e2d3c4b5a69788796a5\n",
     cmd_kill},
    {"health", "", "Show whether sbxd is healthy, and its isolation",
     "A summary of GET /healthz: status (ok, draining, degraded with its reason), version,\n"
     "uptime, commands running out of the most allowed, background processes, and the\n"
     "isolation every command gets (tree_kill, cgroup, seccomp, memory, pids, cpu, user,\n"
     "capabilities, no_new_privs).\n"
     "\n"
     "Options:\n"
     "  -h, --help  show this help\n"
     "\n"
     "Exit status: 0 when sbxd says ok; 1 when it is draining or degraded; 125 when it\n"
     "cannot be reached, or for a usage error.\n"
     "\n"
     "Examples:\n"
     "  sbx health\n"
     "  until sbx health >/dev/null 2>&1; do sleep 0.2; done\n",
     cmd_health},
    {"usage", "[--json]", "Show the sandbox's CPU, memory and disk use",
     "A summary of GET /usage: CPU used (a percentage of the CPUs available, over the time\n"
     "since the previous reading), memory used and its limit (from sbxd's cgroup where it has\n"
     "one, else the machine's), disk used and total of the workspace and /tmp, and the\n"
     "commands, background processes and contexts running.\n"
     "\n"
     "Options:\n"
     "  --json      print sbxd's JSON answer as it is\n"
     "  -h, --help  show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx usage\n"
     "  sbx usage --json | jq .mem_used\n",
     cmd_usage},
    {"ports", "[--json]", "List what listens in the sandbox",
     "A table of GET /ports: each TCP port something listens on, its address, the background\n"
     "process it belongs to, whether sbxd's proxy reaches it (/proxy/PORT/) and the command\n"
     "holding it.\n"
     "\n"
     "Options:\n"
     "  --json      print sbxd's JSON answer as it is\n"
     "  -h, --help  show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx ports\n"
     "  curl -H \"Authorization: Bearer $SBX_TOKEN\" http://127.0.0.1:8888/proxy/3000/\n",
     cmd_ports},
    {"attach", "ID", "Attach this terminal to a background process's terminal",
     "An interactive raw terminal on process ID (started with a pty: sbx shell, or POST\n"
     "/processes with \"pty\") over sbxd's WebSocket (GET /processes/ID/tty): keys go to the\n"
     "process, its output to this terminal, which it resizes as this one is (SIGWINCH). The\n"
     "output sbxd still holds is shown first. Ctrl-] detaches and leaves the process\n"
     "running; sbx attach ID comes back to it.\n"
     "\n"
     "Options:\n"
     "  -h, --help  show this help\n"
     "\n"
     "Exit status: the process's when it ended while attached; 0 on a detach; 125 when sbxd\n"
     "cannot be reached or refused.\n"
     "\n"
     "Examples:\n"
     "  sbx attach 5f0c1e2d3c4b5a69788796a5\n",
     cmd_attach},
    {"shell", "[--cwd DIR] [COMMAND]", "Start a shell in a pty and attach to it",
     "Starts COMMAND (default: bash -il) as a background process with a terminal of this\n"
     "one's size, then attaches as sbx attach does. Ctrl-] detaches (the shell keeps running);\n"
     "exiting the shell ends it.\n"
     "\n"
     "Options:\n"
     "  -C, --cwd DIR  the shell's working directory, relative to the workspace\n"
     "  -h, --help     show this help\n"
     "\n"
     "Exit status: the shell's when it ended; 0 on a detach; 125 when sbxd cannot be reached\n"
     "or refused.\n"
     "\n"
     "Examples:\n"
     "  sbx shell\n"
     "  sbx shell --cwd src 'python3 -i'\n",
     cmd_shell},
    {"reset", "[--from ARCHIVE] [--json]", "Clean the sandbox for the next task",
     "POST /reset: every command, background process and context is ended (kernels and\n"
     "shells start empty next time), the workspace is emptied (or given sbxd's\n"
     "--workspace-baseline tree again), what the command user left in /tmp, /var/tmp and\n"
     "/dev/shm is removed, and what still ran as the command user is killed. Prints what was\n"
     "removed and how long it took. Requests that come meanwhile get 503 (retry). With\n"
     "--from, the clean workspace then receives the tree of ARCHIVE, a tar or zip already in\n"
     "the workspace (sbx put it first), extracted all or nothing.\n"
     "\n"
     "Options:\n"
     "  -f, --from ARCHIVE  set the workspace up from ARCHIVE (a path in the workspace)\n"
     "  -j, --json          print sbxd's answer as it is (one JSON object)\n"
     "  -h, --help          show this help\n"
     "\n" EXIT_STATUS_HELP "\n"
     "Examples:\n"
     "  sbx reset\n"
     "  sbx put task.tar.gz task.tar.gz && sbx reset --from task.tar.gz\n"
     "  sbx reset --json | jq .duration_ms\n",
     cmd_reset},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const struct sbx_cmd *command_find(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

/* `sbx --help`: generated from the table, so that no command is ever left out. */
static int print_overview(void)
{
    printf("Usage: sbx [--url URL] COMMAND [ARGS]...\n"
           "\n"
           "sbx is the command-line client of sbxd, the sandbox daemon: it runs commands in the\n"
           "sandbox, moves files in and out of its workspace and watches background processes.\n"
           "\n"
           "Commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        char head[64];
        snprintf(head, sizeof(head), "%s %s", commands[i].name, commands[i].synopsis);
        printf("  %-36s %s\n", head, commands[i].summary);
    }
    printf("\n"
           "Options (before COMMAND):\n"
           "  -u, --url URL  sbxd's address (default: $SBX_URL, else " SBX_DEFAULT_URL ")\n"
           "  -h, --help     show this help; 'sbx COMMAND --help' or 'sbx help COMMAND' shows a\n"
           "                 command's options and examples\n"
           "  -V, --version  print sbx's version\n"
           "\n"
           "Remote paths are relative to the sandbox's workspace (its root is '' or '/').\n"
           "\n"
           "Exit status:\n"
           "  exec, run  the command's own (128+N after signal N, 127 when it could not start)\n"
           "  others     0 on success (health: 1 when sbxd is draining or degraded)\n"
           "  all        125 when sbx itself fails: sbxd refused or cannot be reached, the\n"
           "             operation failed, or a usage error (as docker run and env use 125)\n"
           "sbx's own errors are one line on stderr: 'sbx: COMMAND: message (HTTP status)'.\n"
           "\n"
           "Environment:\n"
           "  SBX_URL    sbxd's address when --url is not given\n"
           "  SBX_TOKEN  the bearer token sbxd requires (or SBX_TOKEN_FILE: a file holding it)\n"
           "\n"
           "Examples:\n"
           "  sbx exec -- python3 -c 'print(6 * 7)'\n"
           "  sbx run 'make test 2>&1 | tail -n 20'\n"
           "  sbx --url http://10.0.0.7:8888 exec --stream --timeout 10m -- make\n"
           "  sbx put model.bin models/ && sbx ls models\n"
           "  sbx get results/out.csv -\n"
           "  sbx ps; sbx logs ID; sbx kill -s INT ID\n");
    return fflush(stdout) == 0 ? SBX_OK : SBX_FAIL;
}

/* The base URL: a scheme added when missing ("localhost:8888"), trailing slashes dropped so
 * that paths can be appended. SBX_OK or SBX_USAGE. */
static int url_set(struct sbx *s, const char *url)
{
    const char *scheme = strstr(url, "://") ? "" : "http://";
    if (!*url)
        return usage_error(NULL, "the URL of sbxd is empty");
    if (*scheme == '\0' && strncasecmp(url, "http://", 7) != 0 &&
        strncasecmp(url, "https://", 8) != 0)
        return usage_error(NULL, "'%s' is not an http:// URL", url);
    if ((size_t)snprintf(s->url, sizeof(s->url), "%s%s", scheme, url) >= sizeof(s->url))
        return usage_error(NULL, "the URL of sbxd is too long");
    size_t n = strlen(s->url);
    while (n > 0 && s->url[n - 1] == '/')
        s->url[--n] = '\0';
    return SBX_OK;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {{"url", required_argument, NULL, 'u'},
                                          {"version", no_argument, NULL, 'V'},
                                          {NULL, 0, NULL, 0}};
    const char *url = getenv("SBX_URL");
    if (!url || !*url)
        url = SBX_DEFAULT_URL;
    int c;
    opt_reset();
    while ((c = opt_next(NULL, argc, argv, "u:V", longs)) != -1) {
        switch (c) {
        case 'u':
            url = optarg;
            break;
        case 'V':
            printf("sbx %s\n", SBXD_VERSION);
            return fflush(stdout) == 0 ? SBX_OK : SBX_FAIL;
        case 'h':
            return print_overview();
        default:
            return SBX_USAGE;
        }
    }
    if (optind >= argc)
        return usage_error(NULL, "no command given");
    const char *name = argv[optind];
    if (strcmp(name, "help") == 0) {
        /* `sbx help [COMMAND]`, as git and go have it. */
        if (optind + 1 >= argc)
            return print_overview();
        const struct sbx_cmd *cmd = command_find(argv[optind + 1]);
        return cmd ? cmd_print_help(cmd)
                   : usage_error(NULL, "unknown command '%s'", argv[optind + 1]);
    }
    const struct sbx_cmd *cmd = command_find(name);
    if (!cmd)
        return usage_error(NULL, "unknown command '%s'", name);

    struct sbx s;
    int r = url_set(&s, url);
    if (r != SBX_OK)
        return r;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return fail(NULL, "cannot initialise libcurl");
    r = cmd->run(&s, cmd, argc - optind, argv + optind);
    curl_global_cleanup();
    return r;
}
