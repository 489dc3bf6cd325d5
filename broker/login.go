package broker

import (
	"net"
	"slices"
	"strings"
)

// UserInfo describes a user account.
type UserInfo struct {
	Name, PasswordHash, HashingAlgorithm string
	Tags                                 []string
}

// Login checks a user's password as an AMQP login does (loopback rules
// too) and describes the user, for the management API's basic auth.
func (b *Broker) Login(user, password string, remote net.Addr) (UserInfo, error) {
	if err := b.Authenticate(user, password, remote); err != nil {
		return UserInfo{}, err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	u := b.users[user]
	return UserInfo{Name: u.Name, PasswordHash: u.PasswordHash, HashingAlgorithm: "rabbit_password_hashing_sha256", Tags: slices.Clone(u.Tags)}, nil
}

// PermissionInfo is a user's permissions in a vhost.
type PermissionInfo struct{ User, VHost, Configure, Write, Read string }

// Permissions lists every user's permissions, by vhost then user.
func (b *Broker) Permissions() []PermissionInfo {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []PermissionInfo
	for _, u := range b.users {
		for v, p := range u.Permissions {
			out = append(out, PermissionInfo{User: u.Name, VHost: v, Configure: p.Configure, Write: p.Write, Read: p.Read})
		}
	}
	slices.SortFunc(out, func(a, b PermissionInfo) int {
		if a.VHost != b.VHost {
			return strings.Compare(a.VHost, b.VHost)
		}
		return strings.Compare(a.User, b.User)
	})
	return out
}

// VHostInfo describes a vhost.
type VHostInfo struct {
	Name, Description, DefaultQueueType string
	Tags                                []string
}

// VHosts lists the vhosts, sorted by name.
func (b *Broker) VHosts() []VHostInfo {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []VHostInfo
	for name := range b.vhosts {
		out = append(out, VHostInfo{Name: name})
	}
	slices.SortFunc(out, func(a, b VHostInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}
