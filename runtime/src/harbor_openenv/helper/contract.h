/* contract.h: everything the helper and the runtime's Python side must agree on, in one place.
 *
 * The helper's C files include it; the Python side reads this very file from the installed
 * package (harbor_openenv/helper/contract.py parses it once) and never repeats a value. So each
 * line below is a plain "#define NAME VALUE" with a comment: VALUE is a decimal integer (an
 * optional u suffix), a shift "(A << B)" of two such integers, or one string literal. Nothing
 * else belongs here: contract.py refuses any other line that is not a comment, blank, or the
 * include guard.
 */
#ifndef HARBOR_OPENENV_CONTRACT_H
#define HARBOR_OPENENV_CONTRACT_H

/* -- where the helper lives in a task container -------------------------------------------- */

#define MOUNT_DIR "/.harbor-openenv" /* the read-only volume mount holding the helper */
#define HELPER_NAME "helper"         /* the helper's file name in that folder */

/* -- subcommands: helper SUBCOMMAND ... (main.c) -------------------------------------------- */

#define COMMAND_KEEP "keep"   /* PID 1 of every task container (keep.c) */
#define COMMAND_IDLE "idle"   /* waits forever: an ENTRYPOINT's keepalive (main.c) */
#define COMMAND_SERVE "serve" /* the exec channel (serve.c) */
#define COMMAND_RELAY "relay" /* a port carried over the exec's stdio (relay.c) */
#define COMMAND_FILE "file"   /* an agent's file action (file.c), then one of the three below */
#define FILE_READ "read"      /* file read ROOT PATH LIMIT */
#define FILE_WRITE "write"    /* file write ROOT PATH (the content on standard input) */
#define FILE_LIST "list"      /* file list ROOT PATH */

/* -- exit codes ------------------------------------------------------------------------------ */

#define EXIT_USAGE 2 /* a malformed command line, a keeper not PID 1, a malformed channel request */

/* The file actions' (file.c) */
#define FILE_FAILED 1      /* another error: its message on stderr */
#define FILE_OUTSIDE 3     /* the path resolves outside ROOT: the real path it reached on stderr */
#define FILE_MISSING 4     /* no such entry (for a write: a folder could not be made) */
#define FILE_IS_FOLDER 5   /* a read or write of a folder */
#define FILE_NOT_REGULAR 6 /* a read or write of something else that is not a regular file */
#define FILE_MESSAGE_ROOM 4096 /* what the runtime reads past a read's LIMIT, for its message */

/* -- the keeper's requests (keep.c): "ID WORD ARGS..." tab-separated, one line each ----------- */

#define REQUEST_MARK "mark" /* ID mark: the processes running now are the baseline */
#define REQUEST_PARK "park" /* ID park USERS: their uids' killers, for the stops to come */
#define REQUEST_STOP "stop" /* ID stop USERS [VUSER VDIR TDIR stage|keep] */
#define REQUEST_CHANGES "changes" /* ID changes [SKIP...]: what changed since the mark */
#define PREPARE_STAGE "stage" /* a stop's last field: empty TDIR for the tests to be staged */
#define PREPARE_KEEP "keep"   /* a stop's last field: TDIR is the image's; chmod +x test.sh */
#define ANSWER_OK "ok"        /* "ID ok[ PID:START...]" */
#define ANSWER_ERR "err"      /* "ID err CODE PROBLEM", CODE one of the five below */
#define KEEP_ENTRYPOINT_EXITED 96 /* the image's ENTRYPOINT exited (before a mark) */
#define KEEP_STOP_FAILED 97       /* processes still alive after STOP_SECONDS, or cannot look */
#define KEEP_PREPARE_FAILED 98    /* the verifier's folders could not be prepared */
#define KEEP_CHANGES_FAILED 99    /* changes could not be listed (no mark, too many): ask the engine */
#define KEEP_BAD_REQUEST 2        /* a malformed or unknown request */
#define STOP_SECONDS 20           /* how long a stop may take before it fails */
#define ENTRYPOINT_WAIT_MS 5000   /* how long mark waits for an image ENTRYPOINT's start-up */
#define CHANGES_MAX_BYTES (4u << 20) /* a changes answer's length, past which it fails */
#define CHANGES_ADDED_DIR "/usr/local/bin" /* where a changes answer tells added from changed */
#define CHANGE_ADDED "A"          /* a changes entry's kind: a name CHANGES_ADDED_DIR lacked at mark */
#define CHANGE_CHANGED "C"        /* a changes entry's kind: changed, added elsewhere, or a folder */

/* -- the exec channel (serve.c) ---------------------------------------------------------------
 * A request: a 4-byte big-endian length, then REQUEST_HEAD bytes (an 8-byte nonce, timeout in
 * ms, output cap in bytes, argc, envc: 4 bytes each), the working directory, argc arguments and
 * envc NAME=VALUE strings (each a 4-byte length and its bytes, no NUL), and the rest is the
 * command's standard input. An answer: ANSWER_MAGIC, the nonce, a flags byte, the exit code and
 * the output's length (4 bytes each; ANSWER_HEAD bytes in all), then the output. */

#define MAX_REQUEST (80u << 20) /* a request's length: a write's content (8 MiB by default) etc. */
#define MAX_OUTPUT (64u << 20)  /* a request's output cap */
#define MAX_STRINGS 65536       /* a request's argc, and its envc */
#define REQUEST_HEAD 24         /* the fixed part of a request, after its length */
#define ANSWER_HEAD 21          /* the fixed part of an answer, before its output */
#define ANSWER_MAGIC "HOE1"     /* an answer's first 4 bytes */
#define ANSWER_TIMED_OUT 1      /* flag: the command ran past its timeout; its group was killed */
#define ANSWER_TRUNCATED 2      /* flag: output past the cap was read and dropped */
#define ANSWER_EXITED 4         /* flag: the exit code is known (128+N for signal N) */
#define EXIT_GRACE_MS 2000      /* after the command exits, how long its output may stay open */

/* -- the relay (relay.c) ----------------------------------------------------------------------
 * helper relay PORT listens on 127.0.0.1:PORT; each frame either way is a type byte, a
 * connection id and a count (4 bytes each, big-endian: RELAY_HEAD bytes), then, for RELAY_DATA
 * only, count bytes of the connection's data. Ids are the helper's, from 1, never reused. */

#define RELAY_HEAD 9              /* a frame's fixed part */
#define RELAY_READY 0             /* helper to runtime, id 0: listening; count is the port */
#define RELAY_OPEN 1              /* helper to runtime: a connection was accepted */
#define RELAY_DATA 2              /* either way: count (1 to RELAY_CHUNK) bytes of data follow */
#define RELAY_CLOSE 3             /* either way: the sender's side ended; no more data from it */
#define RELAY_ACK 4               /* either way: count bytes of data were written out */
#define RELAY_CHUNK (64u << 10)   /* a data frame's largest count */
#define RELAY_WINDOW (256u << 10) /* a connection's bytes in flight one way, not yet acked */
#define RELAY_CONNECTIONS 256     /* connections open at once; more wait in the backlog */
#define RELAY_LISTEN_FAILED 1     /* exit: the port cannot be listened on (why, on stderr) */

#endif
