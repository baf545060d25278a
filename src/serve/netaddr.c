/* netaddr.c — addresses, CIDR ranges and X-Forwarded-For (netaddr.h). */
#include "serve/netaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void map4(const uint8_t v4[4], net_addr_t *out) {
    memset(out->a, 0, 10);
    out->a[10] = out->a[11] = 0xff;
    memcpy(out->a + 12, v4, 4);
}

static int is_v4(const net_addr_t *a) {
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return !memcmp(a->a, prefix, 12);
}

int net_parse_addr(const char *s, size_t n, net_addr_t *out) {
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (!n) return -1;
    char buf[64];
    if (s[0] == '[') { /* [v6] or [v6]:port */
        const char *end = memchr(s, ']', n);
        if (!end || (size_t)(end - s - 1) >= sizeof buf) return -1;
        size_t rest = n - (size_t)(end - s) - 1;
        if (rest && (end[1] != ':' || rest == 1)) return -1;
        for (size_t i = 2; i <= rest; i++)
            if (end[i] < '0' || end[i] > '9') return -1;
        memcpy(buf, s + 1, (size_t)(end - s - 1));
        buf[end - s - 1] = 0;
        return inet_pton(AF_INET6, buf, out->a) == 1 ? 0 : -1;
    }
    if (n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    const char *colon = strchr(buf, ':');
    if (colon && !strchr(colon + 1, ':')) { /* a.b.c.d:port */
        if (!colon[1]) return -1;
        for (const char *p = colon + 1; *p; p++)
            if (*p < '0' || *p > '9') return -1;
        buf[colon - buf] = 0;
    } else if (colon) {
        return inet_pton(AF_INET6, buf, out->a) == 1 ? 0 : -1;
    }
    uint8_t v4[4];
    if (inet_pton(AF_INET, buf, v4) != 1) return -1;
    map4(v4, out);
    return 0;
}

static void mask(net_addr_t *a, int bits) {
    for (int i = 0; i < 16; i++) {
        int keep = bits - 8 * i;
        if (keep >= 8) continue;
        a->a[i] &= keep <= 0 ? 0 : (uint8_t)(0xff << (8 - keep));
    }
}

int net_parse_cidrs(const char *list, net_cidr_t **out, int *n, char *err, size_t errn) {
    *out = NULL;
    *n = 0;
    net_cidr_t *v = NULL;
    int k = 0;
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *slash = memchr(p, '/', len);
        size_t alen = slash ? (size_t)(slash - p) : len;
        net_addr_t a;
        int bits = -1, ok = net_parse_addr(p, alen, &a) == 0;
        if (ok && memchr(p, '[', alen)) ok = 0; /* no brackets or ports in a range */
        if (ok && is_v4(&a)) { /* nor "a.b.c.d:port" (one colon; "::ffff:a.b.c.d" has more) */
            int colons = 0;
            for (size_t i = 0; i < alen; i++) colons += p[i] == ':';
            if (colons == 1) ok = 0;
        }
        if (ok) {
            int v6 = !is_v4(&a) || memchr(p, ':', alen) != NULL, max = v6 ? 128 : 32;
            bits = max;
            if (slash) {
                size_t dl = len - alen - 1;
                bits = 0;
                if (!dl || dl > 3) ok = 0;
                for (size_t i = 0; ok && i < dl; i++) {
                    char ch = slash[1 + i];
                    if (ch < '0' || ch > '9') ok = 0;
                    else bits = bits * 10 + (ch - '0');
                }
                if (bits > max) ok = 0;
            }
            if (!v6) bits += 96;
        }
        if (!ok) {
            snprintf(err, errn, "'%.*s' is not an address or CIDR range (e.g. 10.0.0.0/8, ::1, fd00::/8)",
                     (int)(len > 80 ? 80 : len), p);
            free(v);
            return -1;
        }
        net_cidr_t *w = realloc(v, (size_t)(k + 1) * sizeof *v);
        if (!w) {
            snprintf(err, errn, "out of memory");
            free(v);
            return -1;
        }
        v = w;
        mask(&a, bits);
        v[k].net = a;
        v[k].bits = bits;
        k++;
        if (!end) break;
        p = end + 1;
    }
    *out = v;
    *n = k;
    return 0;
}

int net_in(const net_cidr_t *r, int n, const net_addr_t *a) {
    for (int i = 0; i < n; i++) {
        net_addr_t m = *a;
        mask(&m, r[i].bits);
        if (!memcmp(m.a, r[i].net.a, 16)) return 1;
    }
    return 0;
}

int net_from_sockaddr(const struct sockaddr *sa, net_addr_t *out) {
    if (!sa) return -1;
    if (sa->sa_family == AF_INET) {
        map4((const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr, out);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        memcpy(out->a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return 0;
    }
    return -1;
}

void net_format(const net_addr_t *a, char *buf, size_t n) {
    char t[INET6_ADDRSTRLEN];
    if (is_v4(a)) inet_ntop(AF_INET, a->a + 12, t, sizeof t);
    else inet_ntop(AF_INET6, a->a, t, sizeof t);
    snprintf(buf, n, "%s", t);
}

int net_client(const net_addr_t *peer, const char *xff, const net_cidr_t *r, int n, net_addr_t *out) {
    *out = *peer;
    if (!xff || !n || !net_in(r, n, peer)) return 0;
    size_t end = strlen(xff);
    int from_header = 0;
    for (;;) {
        size_t start = end;
        while (start > 0 && xff[start - 1] != ',') start--;
        int blank = 1;
        for (size_t i = start; i < end; i++)
            if (xff[i] != ' ' && xff[i] != '\t') blank = 0;
        if (!blank) {
            net_addr_t a;
            if (net_parse_addr(xff + start, end - start, &a)) return from_header;
            *out = a;
            from_header = 1;
            if (!net_in(r, n, &a)) return 1;
        }
        if (start == 0) return from_header;
        end = start - 1;
    }
}
