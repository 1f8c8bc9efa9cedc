// TCP between the nodes of a run (see dist/net.h). Blocking sockets driven by poll() against a
// deadline, so no wait is longer than the timeout. Messages: a 24-byte header (magic, kind,
// collective sequence number, payload bytes) and the payload; nodes run on the same architecture
// (little-endian, same float format), which the hello checks.

#include "dist/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/common.h"

#define NET_MAGIC 0x4e525443u  // "CTRN"
#define NET_VERSION 2  // 2: the hello is followed by the settings' text (K_SETTINGS)
#define NET_MAX_SETTINGS (1u << 20)
enum { K_HELLO = 100, K_WELCOME, K_REFUSED, K_ALLREDUCE, K_BCAST, K_ERROR, K_SETTINGS };

typedef struct {
    uint32_t magic, kind;
    uint64_t seq, bytes;
} Header;

typedef struct {
    uint32_t magic, version;
    int32_t nodes, node, local_ranks;
    uint32_t float_check;  // 1.0f's bits: same float format and byte order
    uint64_t fingerprint;  // FNV-1a of the settings' text that follows
} Hello;

typedef struct {
    int32_t rank_offset, world;
    char msg[1024];
} Welcome;

struct NodeNet {
    int nodes, node, offset, world;
    int *fd;  // node 0: fd[k] for node k (fd[0] unused); others: fd[0] is the link to node 0
    double timeout;
    uint64_t seq;
    void *scratch;
    size_t scratch_cap;
};

// Moves exactly n bytes (write = 1: send) before the deadline. peer names the other side in errors.
static int io_full(int fd, void *buf, size_t n, int write, double deadline, const char *peer, char *err, size_t errlen) {
    char *p = buf;
    while (n > 0) {
        double left = deadline - ct_now();
        if (left <= 0) return ct_fail(err, errlen, "%s: nothing %s for the whole timeout", peer, write ? "accepted" : "received");
        struct pollfd pf = {fd, (short)(write ? POLLOUT : POLLIN), 0};
        int pr = poll(&pf, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return ct_fail(err, errlen, "%s: poll: %s", peer, strerror(errno));
        if (pr == 0) continue;
        ssize_t k = write ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        // An orderly close (0) or a reset (a killed process, depending on timing): the same news.
        if (k == 0 || (k < 0 && (errno == ECONNRESET || errno == EPIPE)))
            return ct_fail(err, errlen, "%s closed the connection: the node died or was stopped", peer);
        if (k < 0) return ct_fail(err, errlen, "%s: connection lost (%s): the node died or was stopped", peer, strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int send_msg(int fd, uint32_t kind, uint64_t seq, const void *data, size_t bytes, double dl, const char *peer,
                    char *err, size_t errlen) {
    Header h = {NET_MAGIC, kind, seq, bytes};
    if (io_full(fd, &h, sizeof h, 1, dl, peer, err, errlen)) return -1;
    return bytes ? io_full(fd, (void *)data, bytes, 1, dl, peer, err, errlen) : 0;
}

static int recv_header(int fd, Header *h, double dl, const char *peer, char *err, size_t errlen) {
    if (io_full(fd, h, sizeof *h, 0, dl, peer, err, errlen)) return -1;
    if (h->magic != NET_MAGIC) return ct_fail(err, errlen, "%s: not a ctrain node (bad message header)", peer);
    return 0;
}

static void tune(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int listen_on(int port, char *err, size_t errlen) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return ct_fail(err, errlen, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 64)) {
        int e = errno;
        close(fd);
        return ct_fail(err, errlen, "node 0 cannot listen on port %d: %s", port, strerror(e));
    }
    return fd;
}

static int connect_to(const char *host, int port, double deadline, char *err, size_t errlen) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host, ps, &hints, &res);
    if (gai) return ct_fail(err, errlen, "--master %s:%d: %s", host, port, gai_strerror(gai));
    int last = 0;
    for (;;) {  // node 0 may not be listening yet: retry until the deadline
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            freeaddrinfo(res);
            return ct_fail(err, errlen, "socket: %s", strerror(errno));
        }
        if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
            freeaddrinfo(res);
            return fd;
        }
        last = errno;
        close(fd);
        if (ct_now() > deadline) break;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(res);
    return ct_fail(err, errlen, "cannot reach node 0 at %s:%d within the timeout (%s)", host, port, strerror(last));
}

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

// The value of the line `key` (key<TAB>value) in text: its start and length, or NULL.
static const char *setting_value(const char *text, const char *key, size_t keylen, size_t *len) {
    for (const char *l = text; *l;) {
        const char *nl = strchr(l, '\n');
        size_t ll = nl ? (size_t)(nl - l) : strlen(l);
        if (ll > keylen && l[keylen] == '\t' && !memcmp(l, key, keylen)) {
            *len = ll - keylen - 1;
            return l + keylen + 1;
        }
        l += ll + (nl != NULL);
    }
    return NULL;
}

// Names what differs between node 0's settings (mine) and node k's (theirs), at most three
// settings and a count of the rest, into msg.
static void settings_diff(int k, const char *mine, const char *theirs, char *msg, size_t cap) {
    size_t u = (size_t)snprintf(msg, cap, "node %d's settings differ from node 0's:", k);
    int shown = 0, more = 0;
    for (int pass = 0; pass < 2; pass++) {  // node 0's keys, then the keys only node k has
        const char *a = pass ? theirs : mine, *b = pass ? mine : theirs;
        for (const char *l = a; *l;) {
            const char *nl = strchr(l, '\n');
            size_t ll = nl ? (size_t)(nl - l) : strlen(l);
            const char *tab = memchr(l, '\t', ll);
            if (tab) {
                size_t kl = (size_t)(tab - l), vl = ll - kl - 1, ol = 0;
                const char *o = setting_value(b, l, kl, &ol);
                int differs = pass ? o == NULL : (o == NULL || ol != vl || memcmp(o, tab + 1, vl));
                if (differs && shown < 3 && u < cap) {
                    const char *mv = pass ? "(none)" : tab + 1, *tv = pass ? tab + 1 : o ? o : "(none)";
                    int ml = pass ? 6 : (int)vl, tl = pass ? (int)vl : o ? (int)ol : 6;
                    u += (size_t)snprintf(msg + u, cap - u, "%s %.*s: node %d has %.*s, node 0 has %.*s", shown ? ";" : "",
                                          (int)kl, l, k, tl, tv, ml, mv);
                    shown++;
                } else if (differs) {
                    more++;
                }
            }
            l += ll + (nl != NULL);
        }
    }
    if (more && u < cap) u += (size_t)snprintf(msg + u, cap - u, " (and %d more)", more);
    if (!shown && u < cap) u += (size_t)snprintf(msg + u, cap - u, " (the same text, another hash)");
    if (u < cap) snprintf(msg + u, cap - u, "; every node must run the same command");
}

NodeNet *net_connect(int nodes, int node, const char *host, int port, const char *settings, int local_ranks,
                     double timeout_s, char *err, size_t errlen) {
    if (nodes < 2 || node < 0 || node >= nodes) {
        ct_fail(err, errlen, "node %d of %d nodes", node, nodes);
        return NULL;
    }
    NodeNet *n = ct_zalloc(sizeof *n);
    n->nodes = nodes;
    n->node = node;
    n->timeout = timeout_s;
    n->fd = ct_alloc(nodes * sizeof(int));
    for (int k = 0; k < nodes; k++) n->fd[k] = -1;
    const double dl = ct_now() + timeout_s;
    float one = 1.0f;
    const size_t settings_len = strlen(settings);
    if (settings_len >= NET_MAX_SETTINGS) {
        ct_fail(err, errlen, "the settings to compare at the rendezvous are %zu bytes, more than %u", settings_len,
                NET_MAX_SETTINGS);
        return NULL;
    }
    const uint64_t fingerprint = fnv1a(settings, settings_len);
    Hello me = {NET_MAGIC, NET_VERSION, nodes, node, local_ranks, 0, fingerprint};
    memcpy(&me.float_check, &one, 4);
    if (node == 0) {
        int lfd = listen_on(port, err, errlen);
        if (lfd < 0) goto fail;
        int *ranks = ct_zalloc(nodes * sizeof(int));
        ranks[0] = local_ranks;
        int have = 1, bad = 0;
        while (have < nodes && !bad) {
            double left = dl - ct_now();
            struct pollfd pf = {lfd, POLLIN, 0};
            if (left <= 0 || poll(&pf, 1, (int)(left * 1000) + 1) == 0) {
                char missing[256] = "";
                size_t u = 0;
                for (int k = 1; k < nodes && u + 12 < sizeof missing; k++)
                    if (n->fd[k] < 0) u += snprintf(missing + u, sizeof missing - u, "%s%d", u ? ", " : "", k);
                ct_fail(err, errlen, "node 0 waited %.0f s on port %d for node(s) %s, which never connected", timeout_s, port, missing);
                bad = 1;
                break;
            }
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0) continue;
            tune(fd);
            Header h;
            Hello hi;
            char tmp[300];
            if (recv_header(fd, &h, dl, "a connecting node", tmp, sizeof tmp) || h.kind != K_HELLO || h.bytes != sizeof hi ||
                io_full(fd, &hi, sizeof hi, 0, dl, "a connecting node", tmp, sizeof tmp) || hi.magic != NET_MAGIC) {
                close(fd);  // not one of ours (a port scan, a stray client): ignore it
                continue;
            }
            Welcome w;
            memset(&w, 0, sizeof w);
            char *theirs = NULL;
            if (hi.version == NET_VERSION) {  // its settings follow the hello
                Header hs;
                if (recv_header(fd, &hs, dl, "a connecting node", tmp, sizeof tmp) || hs.kind != K_SETTINGS ||
                    hs.bytes >= NET_MAX_SETTINGS) {
                    close(fd);
                    continue;
                }
                theirs = ct_alloc(hs.bytes + 1);
                if (io_full(fd, theirs, hs.bytes, 0, dl, "a connecting node", tmp, sizeof tmp)) {
                    free(theirs);
                    close(fd);
                    continue;
                }
                theirs[hs.bytes] = 0;
            }
            if (hi.version != NET_VERSION || hi.float_check != me.float_check)
                snprintf(w.msg, sizeof w.msg, "node %d runs another ctrain version or architecture", hi.node);
            else if (hi.nodes != nodes)
                snprintf(w.msg, sizeof w.msg, "node %d was started with --nodes %d, node 0 with --nodes %d", hi.node, hi.nodes, nodes);
            else if (hi.node < 1 || hi.node >= nodes || n->fd[hi.node] >= 0)
                snprintf(w.msg, sizeof w.msg, "a second node claims --node-rank %d", hi.node);
            else if (hi.fingerprint != fingerprint || strcmp(theirs, settings))
                settings_diff(hi.node, settings, theirs, w.msg, sizeof w.msg);
            else if (hi.local_ranks != local_ranks)
                snprintf(w.msg, sizeof w.msg, "node %d has %d ranks, node 0 has %d", hi.node, hi.local_ranks, local_ranks);
            free(theirs);
            if (w.msg[0]) {
                send_msg(fd, K_REFUSED, 0, &w, sizeof w, ct_now() + 2, "node", tmp, sizeof tmp);
                close(fd);
                ct_fail(err, errlen, "rendezvous refused: %s", w.msg);
                bad = 1;
                break;
            }
            n->fd[hi.node] = fd;
            ranks[hi.node] = hi.local_ranks;
            have++;
        }
        close(lfd);
        if (!bad) {
            int off = 0;
            for (int k = 0; k < nodes; k++) off += ranks[k];
            n->world = off;
            off = ranks[0];
            for (int k = 1; k < nodes && !bad; k++) {
                Welcome w = {off, n->world, ""};
                char peer[32];
                snprintf(peer, sizeof peer, "node %d", k);
                bad = send_msg(n->fd[k], K_WELCOME, 0, &w, sizeof w, dl, peer, err, errlen) != 0;
                off += ranks[k];
            }
        }
        free(ranks);
        if (bad) goto fail;
        n->offset = 0;
    } else {
        int fd = connect_to(host, port, dl, err, errlen);
        if (fd < 0) goto fail;
        tune(fd);
        n->fd[0] = fd;
        Header h;
        Welcome w;
        if (send_msg(fd, K_HELLO, 0, &me, sizeof me, dl, "node 0", err, errlen) ||
            send_msg(fd, K_SETTINGS, 0, settings, settings_len, dl, "node 0", err, errlen) ||
            recv_header(fd, &h, dl, "node 0", err, errlen) || h.bytes != sizeof w ||
            io_full(fd, &w, sizeof w, 0, dl, "node 0", err, errlen))
            goto fail;
        if (h.kind == K_REFUSED) {
            w.msg[sizeof w.msg - 1] = 0;
            ct_fail(err, errlen, "node 0 refused this node: %s", w.msg);
            goto fail;
        }
        n->offset = w.rank_offset;
        n->world = w.world;
    }
    return n;
fail:
    net_close(n);
    return NULL;
}

void net_close(NodeNet *n) {
    if (!n) return;
    for (int k = 0; k < n->nodes; k++)
        if (n->fd[k] >= 0) close(n->fd[k]);
    free(n->fd);
    free(n->scratch);
    free(n);
}

int net_node(const NodeNet *n) { return n->node; }
int net_rank_offset(const NodeNet *n) { return n->offset; }
int net_world(const NodeNet *n) { return n->world; }

static const char *kind_name(uint32_t k) {
    return k == K_ALLREDUCE ? "allreduce" : k == K_BCAST ? "broadcast" : "?";
}

// One star collective. Every node sends (kind, seq, bytes) and, when `contribute`, its payload;
// node 0 checks agreement, combines and sends the result (or an error) back.
static int star(NodeNet *n, uint32_t kind, int elem, void *buf, size_t bytes, int src_node, char *err, size_t errlen) {
    const double dl = ct_now() + n->timeout;
    n->seq++;
    if (n->node != 0) {
        size_t send_bytes = kind == K_BCAST && n->node != src_node ? 0 : bytes;
        Header h;
        if (send_msg(n->fd[0], kind, n->seq, buf, send_bytes, dl, "node 0", err, errlen) ||
            recv_header(n->fd[0], &h, dl, "node 0", err, errlen))
            return -1;
        if (h.kind == K_ERROR) {
            char msg[512] = "";
            size_t k = CT_MIN(h.bytes, sizeof msg - 1);
            if (io_full(n->fd[0], msg, k, 0, dl, "node 0", err, errlen)) return -1;
            return ct_fail(err, errlen, "%s", msg);
        }
        if (h.bytes != bytes) return ct_fail(err, errlen, "node 0 answered %llu bytes, expected %zu", (unsigned long long)h.bytes, bytes);
        return io_full(n->fd[0], buf, bytes, 0, dl, "node 0", err, errlen);
    }
    if (n->scratch_cap < bytes) {
        free(n->scratch);
        n->scratch = ct_alloc(bytes);
        n->scratch_cap = bytes;
    }
    char msg[512] = "";
    for (int k = 1; k < n->nodes && !msg[0]; k++) {
        char peer[32];
        snprintf(peer, sizeof peer, "node %d", k);
        Header h;
        if (recv_header(n->fd[k], &h, dl, peer, err, errlen)) return -1;
        size_t want = kind == K_BCAST && k != src_node ? 0 : bytes;
        if (h.kind != kind || h.seq != n->seq || h.bytes != want) {
            snprintf(msg, sizeof msg, "nodes disagree on a collective: node 0 called %s #%llu (%zu bytes), node %d called "
                     "%s #%llu (%llu bytes)", kind_name(kind), (unsigned long long)n->seq, bytes, k, kind_name(h.kind),
                     (unsigned long long)h.seq, (unsigned long long)h.bytes);
            break;
        }
        if (!want) continue;
        if (io_full(n->fd[k], n->scratch, want, 0, dl, peer, err, errlen)) return -1;
        if (kind == K_BCAST) memcpy(buf, n->scratch, bytes);
        else if (elem == NET_F32) for (size_t i = 0; i < bytes / 4; i++) ((float *)buf)[i] += ((float *)n->scratch)[i];
        else if (elem == NET_F64) for (size_t i = 0; i < bytes / 8; i++) ((double *)buf)[i] += ((double *)n->scratch)[i];
        else for (size_t i = 0; i < bytes / 8; i++) ((int64_t *)buf)[i] += ((int64_t *)n->scratch)[i];
    }
    for (int k = 1; k < n->nodes; k++) {
        char peer[32];
        snprintf(peer, sizeof peer, "node %d", k);
        int rc = msg[0] ? send_msg(n->fd[k], K_ERROR, n->seq, msg, strlen(msg), dl, peer, err, errlen)
                        : send_msg(n->fd[k], kind, n->seq, buf, bytes, dl, peer, err, errlen);
        if (rc && !msg[0]) return -1;
    }
    if (msg[0]) return ct_fail(err, errlen, "%s", msg);
    return 0;
}

int net_allreduce(NodeNet *n, int kind, void *buf, size_t count, char *err, size_t errlen) {
    size_t es = kind == NET_F32 ? 4 : 8;
    return star(n, K_ALLREDUCE, kind, buf, count * es, 0, err, errlen);
}
int net_broadcast(NodeNet *n, void *buf, size_t bytes, int root, char *err, size_t errlen) {
    if (root < 0 || root >= n->nodes) return ct_fail(err, errlen, "broadcast from node %d of %d", root, n->nodes);
    return star(n, K_BCAST, 0, buf, bytes, root, err, errlen);
}
int net_barrier(NodeNet *n, char *err, size_t errlen) { return star(n, K_ALLREDUCE, NET_I64, NULL, 0, 0, err, errlen); }

int net_first_host(const char *list, char *out, size_t outlen) {
    // The first entry ends at a comma outside brackets; "prefix[a-b,c]" expands to prefix + a.
    size_t i = 0, o = 0;
    while (list[i] && list[i] != ',' && list[i] != '[') {
        if (o + 1 >= outlen) return -1;
        out[o++] = list[i++];
    }
    if (list[i] == '[') {
        i++;
        if (!(list[i] >= '0' && list[i] <= '9')) return -1;
        while (list[i] >= '0' && list[i] <= '9') {  // the first number keeps its zero padding
            if (o + 1 >= outlen) return -1;
            out[o++] = list[i++];
        }
        if (list[i] != '-' && list[i] != ',' && list[i] != ']') return -1;
        if (!strchr(list + i, ']')) return -1;
        const char *after = strchr(list + i, ']') + 1;  // a suffix after the brackets ("n[1-2]-ib")
        while (*after && *after != ',' && *after != '[') {
            if (o + 1 >= outlen) return -1;
            out[o++] = *after++;
        }
    }
    out[o] = 0;
    return o ? 0 : -1;
}
