/* netaddr.h — client addresses of `tern serve`: IPv4 and IPv6 in one 16-byte form (IPv4 as
 * ::ffff:a.b.c.d), CIDR ranges (--trusted-proxies) and the client behind trusted proxies by
 * X-Forwarded-For (the rightmost address not in a trusted range). Pure functions on untrusted
 * text: never read beyond the given length, never allocate but in net_parse_cidrs. */
#ifndef TERN_SERVE_NETADDR_H
#define TERN_SERVE_NETADDR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct {
    uint8_t a[16]; /* network order; IPv4 mapped as ::ffff:a.b.c.d */
} net_addr_t;

typedef struct {
    net_addr_t net; /* masked to bits */
    int bits;       /* prefix length over the 128 bits (an IPv4 /n is 96 + n) */
} net_cidr_t;

/* Parses an address of n bytes: "1.2.3.4", "::1", "[::1]", "[::1]:80", "1.2.3.4:80" (the port is
 * ignored), surrounding spaces and tabs skipped. 0 on success, -1 otherwise. */
int net_parse_addr(const char *s, size_t n, net_addr_t *out);
/* Parses "CIDR[,CIDR...]" ("10.0.0.0/8", "::1", "fd00::/8"; an address alone is /32 or /128).
 * 0 with *out malloc'd (*n entries); -1 with a message naming the bad entry in err. */
int net_parse_cidrs(const char *list, net_cidr_t **out, int *n, char *err, size_t errn);
int net_in(const net_cidr_t *ranges, int n, const net_addr_t *a);
/* From an AF_INET or AF_INET6 socket address; -1 for another family or NULL. */
int net_from_sockaddr(const struct sockaddr *sa, net_addr_t *out);
/* "1.2.3.4" for an IPv4(-mapped) address, else IPv6 text (buf of at least 46 bytes). */
void net_format(const net_addr_t *a, char *buf, size_t n);
/* The client: peer itself unless peer is in ranges; then X-Forwarded-For (xff, may be NULL: the
 * values of all its headers joined by commas) walked from the right, each address in ranges
 * skipped; the first one not in them is the client. Every address trusted: the leftmost. An
 * entry that does not parse stops the walk: the last address reached (a trusted proxy) is the
 * client. Returns 1 when the client came from the header, 0 when it is peer (or a proxy). */
int net_client(const net_addr_t *peer, const char *xff, const net_cidr_t *ranges, int n, net_addr_t *out);

#endif
