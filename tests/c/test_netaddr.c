/* test_netaddr.c — src/serve/netaddr.c: addresses (IPv4, IPv6, bracketed, with ports), CIDR lists
 * (--trusted-proxies) and the client behind trusted proxies by X-Forwarded-For, against expected
 * values written out (the rightmost untrusted address, as nginx's real_ip_recursive and
 * Werkzeug's ProxyFix define it); malformed input (garbage, huge, bad prefixes, empty entries)
 * refused, never read past its end. Also run under ASan/UBSan (make SAN=1 test-c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "serve/netaddr.h"

static const char *fmt(const net_addr_t *a) {
    static char b[64];
    net_format(a, b, sizeof b);
    return b;
}

static void addr_ok(const char *s, const char *want) {
    net_addr_t a;
    int r = net_parse_addr(s, strlen(s), &a);
    CHECK_MSG(r == 0 && !strcmp(fmt(&a), want), "'%s' gave %d '%s', want '%s'", s, r, r ? "" : fmt(&a), want);
}

static void addr_bad(const char *s) {
    net_addr_t a;
    CHECK_MSG(net_parse_addr(s, strlen(s), &a) == -1, "'%s' parsed", s);
}

static void client(const char *trusted, const char *peer, const char *xff, const char *want, int from) {
    net_cidr_t *r = NULL;
    int n = 0;
    char err[256];
    CHECK_MSG(net_parse_cidrs(trusted, &r, &n, err, sizeof err) == 0, "%s: %s", trusted, err);
    net_addr_t p, out;
    CHECK(net_parse_addr(peer, strlen(peer), &p) == 0);
    int f = net_client(&p, xff, r, n, &out);
    CHECK_MSG(!strcmp(fmt(&out), want) && f == from, "peer %s xff '%s' trusted %s: %s (%d), want %s (%d)", peer,
              xff ? xff : "(none)", trusted, fmt(&out), f, want, from);
    free(r);
}

int main(void) {
    addr_ok("1.2.3.4", "1.2.3.4");
    addr_ok(" 10.0.0.1\t", "10.0.0.1");
    addr_ok("1.2.3.4:8080", "1.2.3.4");
    addr_ok("::1", "::1");
    addr_ok("[::1]", "::1");
    addr_ok("[2001:db8::7]:443", "2001:db8::7");
    addr_ok("::ffff:192.0.2.1", "192.0.2.1");
    addr_ok("2001:DB8::1", "2001:db8::1");
    const char *bad[] = {"", " ", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1.2.3.4:", "[::1]:", "1.2.3.4:x", "[::1", "[::1]x",
                         "[::1]:8a", "::g", "unknown", "_hidden", "1.2.3.4 5.6.7.8", "[1.2.3.4]",
                         "1:2:3:4:5:6:7:8:9", "\xff\xfe", "01234567890123456789012345678901234567890123456789012345678901234567"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) addr_bad(bad[i]);
    /* only the n bytes given are read: a copy without its terminator */
    char *raw = malloc(7);
    memcpy(raw, "1.2.3.4", 7);
    net_addr_t a;
    CHECK(net_parse_addr(raw, 7, &a) == 0 && !strcmp(fmt(&a), "1.2.3.4"));
    CHECK(net_parse_addr(raw, 5, &a) == -1); /* "1.2.3" */
    free(raw);

    /* CIDR lists */
    net_cidr_t *r = NULL;
    int n = 0;
    char err[256];
    CHECK(net_parse_cidrs("10.0.0.0/8,192.168.1.7, ::1,fd00::/8,172.16.0.0/12", &r, &n, err, sizeof err) == 0);
    CHECK_EQ_INT(n, 5);
    struct { const char *a; int in; } cases[] = {
        {"10.1.2.3", 1}, {"11.0.0.1", 0}, {"192.168.1.7", 1}, {"192.168.1.8", 0}, {"::1", 1}, {"::2", 0},
        {"fd12:3456::1", 1}, {"fe80::1", 0}, {"172.31.255.255", 1}, {"172.32.0.0", 0}, {"::ffff:10.9.9.9", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(net_parse_addr(cases[i].a, strlen(cases[i].a), &a) == 0);
        CHECK_MSG(net_in(r, n, &a) == cases[i].in, "%s in the ranges: %d", cases[i].a, !cases[i].in);
    }
    free(r);
    CHECK(net_parse_cidrs("0.0.0.0/0", &r, &n, err, sizeof err) == 0 && n == 1);
    CHECK(net_parse_addr("8.8.8.8", 7, &a) == 0 && net_in(r, n, &a));
    CHECK(net_parse_addr("::8", 3, &a) == 0 && !net_in(r, n, &a)); /* 0.0.0.0/0 is IPv4 only */
    free(r);
    CHECK(net_parse_cidrs("10.0.0.1/31", &r, &n, err, sizeof err) == 0);
    CHECK(net_parse_addr("10.0.0.0", 8, &a) == 0 && net_in(r, n, &a));
    CHECK(net_parse_addr("10.0.0.2", 8, &a) == 0 && !net_in(r, n, &a));
    free(r);
    const char *bad_lists[] = {"", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/8/8", "10.0.0.0/-1", "10.0.0.0/ 8",
                               "10.0.0.0/8,", ",10.0.0.0/8", "10.0.0.0/8,,::1", "[::1]", "1.2.3.4:80", "localhost",
                               "10.0.0.0/0008", "10.0.0.0/8 junk"};
    for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
        err[0] = 0;
        CHECK_MSG(net_parse_cidrs(bad_lists[i], &r, &n, err, sizeof err) == -1 && r == NULL && strstr(err, "is not an"),
                  "'%s' accepted (%s)", bad_lists[i], err);
    }
    /* the client: the rightmost untrusted address of X-Forwarded-For, only from a trusted peer */
    client("10.0.0.0/8", "10.0.0.2", "203.0.113.5", "203.0.113.5", 1);
    client("10.0.0.0/8", "10.0.0.2", "198.51.100.1, 203.0.113.5", "203.0.113.5", 1); /* the left one: client's own */
    client("10.0.0.0/8", "10.0.0.2", "198.51.100.1, 203.0.113.5, 10.0.0.9", "203.0.113.5", 1);
    client("10.0.0.0/8", "192.0.2.1", "203.0.113.5", "192.0.2.1", 0);   /* untrusted peer: never the header */
    client("10.0.0.0/8", "10.0.0.2", NULL, "10.0.0.2", 0);
    client("10.0.0.0/8", "10.0.0.2", "", "10.0.0.2", 0);
    client("10.0.0.0/8", "10.0.0.2", "10.0.0.7,10.0.0.8", "10.0.0.7", 1); /* all trusted: the leftmost */
    client("10.0.0.0/8", "10.0.0.2", "garbage, 203.0.113.5", "203.0.113.5", 1);
    client("10.0.0.0/8", "10.0.0.2", "203.0.113.5, garbage", "10.0.0.2", 0); /* stops at a bad entry */
    client("10.0.0.0/8", "10.0.0.2", "198.51.100.1, garbage, 10.0.0.3", "10.0.0.3", 1);
    client("10.0.0.0/8", "10.0.0.2", " , 203.0.113.5 ,", "203.0.113.5", 1);
    client("::1,127.0.0.1", "::1", "[2001:db8::5]:1234", "2001:db8::5", 1);
    client("::1,127.0.0.1", "127.0.0.1", "2001:db8::5, 127.0.0.1", "2001:db8::5", 1);
    client("::1", "::ffff:127.0.0.1", "203.0.113.5", "127.0.0.1", 0);
    /* a huge header: many entries, all trusted, then one address */
    size_t big = 200000;
    char *h = malloc(big + 1);
    for (size_t i = 0; i < big; i += 10) memcpy(h + i, "10.0.0.1, ", 10);
    memcpy(h, "192.0.2.9,", 10);
    h[big] = 0;
    client("10.0.0.0/8", "10.0.0.2", h, "192.0.2.9", 1);
    free(h);
    return check_report("test_netaddr");
}
