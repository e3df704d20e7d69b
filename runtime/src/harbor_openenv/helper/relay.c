/* relay.c: helper relay PORT, the model's port inside a task container (see the Python side,
 * sandbox/relay.py).
 *
 * Listens on 127.0.0.1:PORT in the container's network namespace (loopback exists even with
 * network none) and carries every connection accepted there over standard input and output, the
 * one engine exec stream the runtime holds. The runtime opens its own connection to the one
 * target it chose per RELAY_OPEN: nothing here names an address, so nothing in the container can
 * ask for another. The framing is contract.h's (the relay's section). Flow control is per
 * connection: at most RELAY_WINDOW bytes of its data are in flight each way until the receiver
 * acknowledges what it wrote out (RELAY_ACK), so every buffer is bounded and a slow reader stalls
 * its own connection only. End-of-file on standard input ends the relay, and every connection
 * with it. A malformed frame ends it too (EXIT_USAGE).
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define OUT_LIMIT (4 * (RELAY_HEAD + RELAY_CHUNK)) /* stdout backlog past which sockets wait */

struct conn {
    int fd;                  /* -1: a free slot */
    uint32_t id;
    unsigned char *pending;  /* the runtime's data not yet written to the socket */
    size_t pending_len;
    uint32_t in_flight;      /* our data the runtime has not acknowledged */
    int read_done;           /* we sent RELAY_CLOSE: the socket's input ended */
    int peer_done;           /* the runtime sent RELAY_CLOSE: its side ended */
    int broken;              /* the socket failed: the runtime's data is dropped (and acked) */
};

static struct conn conns[RELAY_CONNECTIONS];
static unsigned char *out;   /* frames for standard output */
static size_t out_len, out_cap;

static void put32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24;
    p[1] = v >> 16;
    p[2] = v >> 8;
    p[3] = v;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Room for n more bytes of output; exits when memory runs out. */
static unsigned char *reserve(size_t n) {
    if (out_len + n > out_cap) {
        size_t cap = out_cap ? out_cap : 1 << 16;
        while (cap < out_len + n) cap *= 2;
        unsigned char *grown = realloc(out, cap);
        if (!grown) exit(fail("helper relay", 1));
        out = grown;
        out_cap = cap;
    }
    return out + out_len;
}

static void frame(int type, uint32_t id, uint32_t count) {
    unsigned char *p = reserve(RELAY_HEAD);
    p[0] = (unsigned char)type;
    put32(p + 1, id);
    put32(p + 5, count);
    out_len += RELAY_HEAD;
}

static struct conn *find(uint32_t id) {
    for (int i = 0; i < RELAY_CONNECTIONS; i++)
        if (conns[i].fd >= 0 && conns[i].id == id) return &conns[i];
    return NULL;
}

static void release(struct conn *c) {
    close(c->fd);
    free(c->pending);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/* The socket's input ended or failed: tell the runtime once. */
static void end_reading(struct conn *c) {
    if (!c->read_done) frame(RELAY_CLOSE, c->id, 0), c->read_done = 1;
}

/* Frees the connection once both sides ended and our writes are done. */
static void settle(struct conn *c) {
    if (c->peer_done && c->pending_len == 0 && !c->broken) shutdown(c->fd, SHUT_WR);
    if (c->read_done && c->peer_done && (c->pending_len == 0 || c->broken)) release(c);
}

/* One frame from the runtime; -1 when it is malformed. */
static int take(int type, uint32_t id, uint32_t count, const unsigned char *data) {
    struct conn *c = find(id);
    if (!c) return type == RELAY_ACK ? 0 : -1; /* a late ack of a connection that ended */
    if (type == RELAY_ACK) {
        if (count > c->in_flight) return -1;
        c->in_flight -= count;
    } else if (type == RELAY_DATA) {
        if (c->peer_done || c->pending_len + count > RELAY_WINDOW) return -1;
        if (c->broken) {
            frame(RELAY_ACK, id, count);
            return 0;
        }
        if (!c->pending && !(c->pending = malloc(RELAY_WINDOW))) exit(fail("helper relay", 1));
        memcpy(c->pending + c->pending_len, data, count);
        c->pending_len += count;
    } else if (type == RELAY_CLOSE) {
        c->peer_done = 1;
        settle(c);
    } else {
        return -1;
    }
    return 0;
}

/* Frames whole in buf[0..*len): each taken, the rest moved to the front; -1 when malformed. */
static int take_frames(unsigned char *buf, size_t *len) {
    size_t at = 0;
    while (*len - at >= RELAY_HEAD) {
        int type = buf[at];
        uint32_t id = be32(buf + at + 1), count = be32(buf + at + 5);
        uint32_t size = type == RELAY_DATA ? count : 0;
        if (type == RELAY_DATA && (count == 0 || count > RELAY_CHUNK)) return -1;
        if (*len - at < RELAY_HEAD + size) break;
        if (take(type, id, count, buf + at + RELAY_HEAD) != 0) return -1;
        at += RELAY_HEAD + size;
    }
    memmove(buf, buf + at, *len - at);
    *len -= at;
    return 0;
}

static int listen_on(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 128) != 0) {
        fprintf(stderr, "cannot listen on 127.0.0.1:%d: %s\n", port, strerror(errno));
        return -1;
    }
    return fd;
}

static void accept_one(int listener, uint32_t *next_id) {
    struct conn *c = NULL;
    for (int i = 0; i < RELAY_CONNECTIONS && !c; i++)
        if (conns[i].fd < 0) c = &conns[i];
    int fd = c ? accept4(listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK) : -1;
    if (fd < 0) return;
    c->fd = fd;
    c->id = (*next_id)++;
    frame(RELAY_OPEN, c->id, 0);
}

/* Reads what the socket has, within the connection's window, as one RELAY_DATA frame. */
static void read_socket(struct conn *c) {
    size_t room = RELAY_WINDOW - c->in_flight;
    room = room < RELAY_CHUNK ? room : RELAY_CHUNK;
    unsigned char *p = reserve(RELAY_HEAD + room);
    ssize_t r = read(c->fd, p + RELAY_HEAD, room);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (r <= 0) {
        end_reading(c);
        settle(c);
        return;
    }
    p[0] = RELAY_DATA;
    put32(p + 1, c->id);
    put32(p + 5, (uint32_t)r);
    out_len += RELAY_HEAD + (size_t)r;
    c->in_flight += (uint32_t)r;
}

/* Writes the runtime's data to the socket and acknowledges what went out. */
static void write_socket(struct conn *c) {
    ssize_t w = write(c->fd, c->pending, c->pending_len);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (w < 0) {
        frame(RELAY_ACK, c->id, (uint32_t)c->pending_len);
        c->pending_len = 0;
        c->broken = 1;
        end_reading(c);
    } else {
        frame(RELAY_ACK, c->id, (uint32_t)w);
        memmove(c->pending, c->pending + w, c->pending_len - (size_t)w);
        c->pending_len -= (size_t)w;
    }
    settle(c);
}

int relay(const char *port_text) {
    char *end;
    long port = strtol(port_text, &end, 10);
    if (*end || port < 1 || port > 65535) {
        fprintf(stderr, "relay: a port from 1 to 65535, not %s\n", port_text);
        return EXIT_USAGE;
    }
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_DUMPABLE, 0); /* no ptrace or /proc/PID/mem by the processes of its uid */
    int listener = listen_on((int)port);
    if (listener < 0) return RELAY_LISTEN_FAILED;
    for (int i = 0; i < RELAY_CONNECTIONS; i++) conns[i].fd = -1;
    fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
    static unsigned char in[RELAY_HEAD + RELAY_CHUNK + (1 << 16)];
    size_t in_len = 0, sent = 0;
    uint32_t next_id = 1;
    frame(RELAY_READY, 0, (uint32_t)port);
    struct pollfd fds[3 + RELAY_CONNECTIONS];
    for (;;) {
        int open = 0;
        for (int i = 0; i < RELAY_CONNECTIONS; i++) open += conns[i].fd >= 0;
        int backlog = out_len - sent < OUT_LIMIT;
        fds[0] = (struct pollfd){0, in_len < sizeof in ? POLLIN : 0, 0};
        fds[1] = (struct pollfd){out_len > sent ? 1 : -1, POLLOUT, 0};
        fds[2] = (struct pollfd){open < RELAY_CONNECTIONS && backlog ? listener : -1, POLLIN, 0};
        for (int i = 0; i < RELAY_CONNECTIONS; i++) {
            struct conn *c = &conns[i];
            short events = 0;
            if (c->fd >= 0 && !c->read_done && c->in_flight < RELAY_WINDOW && backlog)
                events |= POLLIN;
            if (c->fd >= 0 && c->pending_len) events |= POLLOUT;
            fds[3 + i] = (struct pollfd){events ? c->fd : -1, events, 0};
        }
        if (poll(fds, 3 + RELAY_CONNECTIONS, -1) < 0) {
            if (errno == EINTR) continue;
            return fail("relay: poll", 1);
        }
        if (fds[1].revents) {
            ssize_t w = write(1, out + sent, out_len - sent);
            if (w < 0 && errno != EAGAIN && errno != EINTR) return 0; /* the runtime is gone */
            if (w > 0) sent += (size_t)w;
            if (sent == out_len || sent > OUT_LIMIT) { /* keep the buffer's live part in front */
                memmove(out, out + sent, out_len - sent);
                out_len -= sent;
                sent = 0;
            }
        }
        if (fds[0].revents) {
            ssize_t r = read(0, in + in_len, sizeof in - in_len);
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return 0;
            if (r > 0) in_len += (size_t)r;
            if (take_frames(in, &in_len) != 0) {
                fprintf(stderr, "relay: a malformed frame\n");
                return EXIT_USAGE;
            }
        }
        if (fds[2].revents) accept_one(listener, &next_id);
        for (int i = 0; i < RELAY_CONNECTIONS; i++) {
            struct conn *c = &conns[i];
            short got = fds[3 + i].revents;
            if (c->fd < 0 || fds[3 + i].fd != c->fd || !got) continue;
            if (got & POLLOUT || (got & (POLLERR | POLLHUP) && c->pending_len)) write_socket(c);
            if (c->fd >= 0 && !c->read_done && got & (POLLIN | POLLERR | POLLHUP)) read_socket(c);
        }
    }
}
