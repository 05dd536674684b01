// core.shell's user: which user its processes run as, decided once from
// Config.ShellUser and the server's own user, so that a server running as
// root never hands root to an action unless the operator says so.
package runner

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
)

// shellUser is the identity core.shell's processes take.
type shellUser struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32
}

// errShellAsRoot is the start-up refusal of core.shell as root.
var errShellAsRoot = errors.New("core.shell would run its processes as root: name an unprivileged ShellUser (serve/worker --shell-user), or allow root explicitly (ShellAllowRoot)")

// shellCredential returns the user core.shell's processes switch to, nil
// when they keep the server's own user. It refuses root (the server's, or
// a ShellUser that is root) unless c.ShellAllowRoot, and a switch the
// process has no right to make.
func (c Config) shellCredential() (*shellUser, error) {
	euid := os.Geteuid()
	if c.ShellUser == "" {
		if euid == 0 && !c.ShellAllowRoot {
			return nil, errShellAsRoot
		}
		return nil, nil
	}
	u, err := lookupUser(c.ShellUser)
	if err != nil {
		return nil, fmt.Errorf("ShellUser: %w", err)
	}
	if u.uid == 0 && !c.ShellAllowRoot {
		return nil, fmt.Errorf("ShellUser %q: %w", c.ShellUser, errShellAsRoot)
	}
	switch {
	case euid == 0:
		return u, nil
	case uint32(euid) == u.uid:
		return nil, nil // already that user; nothing to switch
	default:
		return nil, fmt.Errorf("ShellUser %q (uid %d): switching user needs root, and this process runs as uid %d", c.ShellUser, u.uid, euid)
	}
}

// lookupUser finds name (a user name, or a numeric uid) in the user
// database. A numeric uid that is not there is taken as is, with the same
// number as its group and no supplementary groups.
func lookupUser(name string) (*shellUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		n, nerr := strconv.ParseUint(name, 10, 32)
		if nerr != nil {
			return nil, err
		}
		if u, err = user.LookupId(name); err != nil {
			return &shellUser{name: name, uid: uint32(n), gid: uint32(n)}, nil
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: uid %q is not a number", name, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: gid %q is not a number", name, u.Gid)
	}
	su := &shellUser{name: u.Username, uid: uint32(uid), gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				su.groups = append(su.groups, uint32(g))
			}
		}
	}
	return su, nil
}
