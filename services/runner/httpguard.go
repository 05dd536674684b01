// core.http's reach: the addresses it refuses to connect to unless the
// action's definition allows them, checked on every connection it dials
// (so a DNS answer that changes between lookups, or a redirect, cannot
// slip past), and the redirects it follows.
package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ErrAddressRefused is wrapped by the failure of a core.http run that would
// have connected to a loopback, link-local (cloud metadata included),
// private, unspecified or otherwise internal address, when the action's
// runner_config does not set allow_private.
var ErrAddressRefused = errors.New("internal address refused (the action's runner_config may set \"allow_private\": true)")

// internalPrefixes are the ranges core.http does not reach by default,
// beyond what net.IP's predicates cover.
var internalPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),         // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),     // carrier-grade NAT (some clouds' metadata)
	netip.MustParsePrefix("192.0.0.0/24"),      // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),     // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),       // reserved, and broadcast
	netip.MustParsePrefix("fd00:ec2::254/128"), // EC2's IPv6 metadata (also in fc00::/7)
}

// ipv4Carriers are the IPv6 ranges whose addresses carry an IPv4 address
// that a translator, a tunnel or the host itself may deliver to: such an
// address is internal when the IPv4 address it carries is. IPv4-compatible
// addresses (deprecated) and local-use NAT64 ones are refused whatever
// they carry. IPv4-mapped ones (::ffff:a.b.c.d) are unmapped first.
var ipv4Carriers = []struct {
	prefix netip.Prefix
	name   string
	always bool                   // refused whatever IPv4 address it carries
	at     func([16]byte) [4]byte // the carried IPv4 address
}{
	{netip.MustParsePrefix("::/96"), "IPv4-compatible", true, func(b [16]byte) [4]byte { return [4]byte(b[12:]) }},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated", false, func(b [16]byte) [4]byte { return [4]byte(b[12:]) }},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64", false, func(b [16]byte) [4]byte { return [4]byte(b[12:]) }},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64", true, func(b [16]byte) [4]byte { return [4]byte{b[6], b[7], b[9], b[10]} }},
	{netip.MustParsePrefix("2002::/16"), "6to4", false, func(b [16]byte) [4]byte { return [4]byte(b[2:6]) }},
	{netip.MustParsePrefix("2001::/32"), "Teredo", false, func(b [16]byte) [4]byte { // the client's address, obfuscated
		return [4]byte{b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff}
	}},
}

// internalAddr says why ip is internal, or "" when it is not.
func internalAddr(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	std := net.IP(ip.AsSlice())
	switch {
	case ip.String() == "169.254.169.254" || ip.String() == "fd00:ec2::254":
		return "a cloud metadata address"
	case std.IsLoopback():
		return "a loopback address"
	case std.IsLinkLocalUnicast(), std.IsLinkLocalMulticast():
		return "a link-local address"
	case std.IsUnspecified():
		return "the unspecified address"
	case std.IsPrivate():
		return "a private address"
	case std.IsMulticast(), std.IsInterfaceLocalMulticast():
		return "a multicast address"
	}
	for _, c := range ipv4Carriers {
		if !c.prefix.Contains(ip) {
			continue
		}
		v4 := netip.AddrFrom4(c.at(ip.As16()))
		if why := internalAddr(v4); why != "" {
			return fmt.Sprintf("%s (%s, as the %s address %s)", why, v4, c.name, ip)
		}
		if c.always {
			return "a reserved address (" + c.name + ")"
		}
	}
	for _, p := range internalPrefixes {
		if p.Contains(ip) {
			return "a reserved address"
		}
	}
	return ""
}

// checkDialAddr refuses address (host:port, as dialled) when its IP is
// internal.
func checkDialAddr(address string) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("core.http: dial %q: %w", address, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("core.http: dial %q: not an IP address", address)
	}
	if why := internalAddr(ip); why != "" {
		return fmt.Errorf("%s is %s: %w", ip.WithZone(""), why, ErrAddressRefused)
	}
	return nil
}

// newDialer returns the dialer of core.http's transports. With a check
// (checkDialAddr), it calls it at connect time on every address it is
// about to connect to, and connects only if it returns nil.
func newDialer(check func(address string) error) *net.Dialer {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if check != nil {
		d.Control = func(_, address string, _ syscall.RawConn) error { return check(address) }
	}
	return d
}

// httpReach is what one run may reach, carried to the redirect policy in
// the request's context.
type httpReach struct {
	allowPrivate bool
	prefix       *url.URL // nil: any URL
}

type reachKey struct{}

// maxRedirects bounds the redirects one run follows.
const maxRedirects = 10

// checkRedirect re-checks every redirect against the run's reach: http or
// https only, under the definition's url when it fixes one, and (before the
// dial checks it again) no internal IP literal unless allowed.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	reach, _ := req.Context().Value(reachKey{}).(httpReach)
	u := req.URL
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("redirect to %q: scheme must be http or https", u.Redacted())
	}
	if reach.prefix != nil {
		if err := checkUnder(u, reach.prefix); err != nil {
			return fmt.Errorf("redirect to %q leaves the action's url %q: %w", u.Redacted(), reach.prefix.Redacted(), err)
		}
	}
	if !reach.allowPrivate {
		if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
			if why := internalAddr(ip); why != "" {
				return fmt.Errorf("redirect to %q: %s is %s: %w", u.Redacted(), ip, why, ErrAddressRefused)
			}
		}
	}
	return nil
}

// checkUnder refuses u unless it is prefix or lies below it: same scheme
// and host, and a path whose segments, decoded, extend prefix's (see
// pathSegments), so that no server, however many times it decodes the
// path, reads it as leaving prefix.
func checkUnder(u, prefix *url.URL) error {
	if !strings.EqualFold(u.Scheme, prefix.Scheme) || !strings.EqualFold(u.Host, prefix.Host) {
		return errors.New("another scheme or host")
	}
	base, err := pathSegments(prefix)
	if err != nil {
		return err
	}
	if len(base) > 1 && base[len(base)-1] == "" {
		base = base[:len(base)-1]
	}
	segs, err := pathSegments(u)
	if err != nil {
		return err
	}
	if len(segs) < len(base) || !slices.Equal(segs[:len(base)], base) {
		return errors.New("a path outside it")
	}
	return nil
}

// maxUnescapes bounds the layers of percent-encoding pathSegments peels.
const maxUnescapes = 4

// pathSegments returns u's path as the segments a server sees that decodes
// it once, or again and again: each segment of the escaped path,
// percent-decoded until it no longer changes. It refuses a path a server
// could read otherwise: a segment that decodes to "." or ".." (a dot
// segment), or to something holding "/" or "\" (an encoded slash), or that
// is still encoded after maxUnescapes layers.
func pathSegments(u *url.URL) ([]string, error) {
	segs := strings.Split(u.EscapedPath(), "/")
	for i, seg := range segs {
		d := seg
		for n := 0; ; n++ {
			next, err := url.PathUnescape(d)
			if err != nil || next == d {
				break
			}
			if n == maxUnescapes {
				return nil, fmt.Errorf("segment %q: more than %d layers of percent-encoding", seg, maxUnescapes)
			}
			d = next
		}
		switch {
		case d == "." || d == "..":
			return nil, fmt.Errorf("dot segment %q", seg)
		case strings.ContainsAny(d, "/\\"):
			return nil, fmt.Errorf("encoded slash in segment %q", seg)
		}
		segs[i] = d
	}
	return segs, nil
}

// newHTTPClient returns a client for core.http over a clone of base's
// transport (nil: http.DefaultTransport) that dials with newDialer(check),
// uses no proxy and no cookie jar, and follows redirects by checkRedirect.
func newHTTPClient(base *http.Client, check func(address string) error) *http.Client {
	var t *http.Transport
	if bt, ok := base.Transport.(*http.Transport); ok {
		t = bt.Clone()
	} else if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		t = dt.Clone()
	} else {
		t = &http.Transport{}
	}
	t.Proxy = nil
	t.Dial, t.DialTLS, t.DialTLSContext = nil, nil, nil //nolint:staticcheck // cleared so every dial is ours
	t.DialContext = newDialer(check).DialContext
	return &http.Client{Transport: t, Timeout: base.Timeout, CheckRedirect: checkRedirect}
}

// withReach returns ctx carrying reach for checkRedirect.
func withReach(ctx context.Context, reach httpReach) context.Context {
	return context.WithValue(ctx, reachKey{}, reach)
}
