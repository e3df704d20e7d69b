/* harbor-openenv-helper: the runtime's own program inside a task container.
 *
 * Built static (no dynamic loader, so /etc/ld.so.preload and a replaced libc never reach it) and
 * mounted read-only into every task container (at MOUNT_DIR/HELPER_NAME), so an agent with root
 * can neither change it nor hook it. It does the work whose honesty decides a reward, one
 * subcommand per file:
 *
 *   helper keep [USER ENTRYPOINT...]     keep.c: PID 1 of every task container, as root; the
 *                                        baseline and the stop before grading on the runtime's
 *                                        requests (stop.c), then the verifier's folders
 *                                        (prepare.c)
 *   helper idle                          main.c: waits forever, the keepalive an ENTRYPOINT is
 *                                        given, where Harbor has sleep infinity
 *   helper serve                         serve.c: the exec channel, as the agent's user
 *   helper relay PORT                    relay.c: 127.0.0.1:PORT carried to the runtime over
 *                                        standard input and output (the model's port)
 *   helper file read ROOT PATH LIMIT | file write ROOT PATH | file list ROOT PATH
 *                                        file.c: the agent's file actions, confined to ROOT;
 *                                        ls.c lists a folder in an image without ls
 *
 * contract.h holds every exit code, limit, flag, magic and request word the runtime's Python
 * side shares with these files (it reads that header, harbor_openenv/helper/contract.py);
 * common.h declares what the files give each other, common.c what more than one of them uses.
 * The build hook (runtime/hatch_build.py) compiles every .c file of this folder together, with
 * Zig's C compiler for each architecture (static musl, -Os, stripped, -Wall -Wextra -Werror).
 */
#include "common.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int idle(void) {
    for (;;) pause();
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], COMMAND_KEEP) == 0) return keep(argc - 2, argv + 2);
    if (argc == 2 && strcmp(argv[1], COMMAND_IDLE) == 0) return idle();
    if (argc == 2 && strcmp(argv[1], COMMAND_SERVE) == 0) return serve();
    if (argc == 3 && strcmp(argv[1], COMMAND_RELAY) == 0) return relay(argv[2]);
    if (argc >= 5 && strcmp(argv[1], COMMAND_FILE) == 0 && argv[3][0] == '/' && argv[4][0] == '/') {
        int op = strcmp(argv[2], FILE_READ) == 0 ? READ : strcmp(argv[2], FILE_WRITE) == 0 ? WRITE
               : strcmp(argv[2], FILE_LIST) == 0 ? LIST : -1;
        if (op >= 0 && argc == (op == READ ? 6 : 5))
            return file_action(op, argv[3], argv[4], op == READ ? argv[5] : "0");
    }
    fprintf(stderr, "usage: %s keep [USER ENTRYPOINT...] | idle | serve | relay PORT"
                    " | file read ROOT PATH LIMIT | file write|list ROOT PATH\n",
            argv[0]);
    return EXIT_USAGE;
}
