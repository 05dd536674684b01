package kurrentdb

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// dialMulti returns the connection OpenURL gives the multi-stream path
// (Options.MultiStreamConn) for the single node cfg names, with its TLS
// settings and credentials; nil for a cluster (gossip seeds or DNS
// discovery): finding the leader for that connection is not built, so a
// store on a cluster keeps the single-stream path. The connection connects
// when first used.
func dialMulti(cfg *esdb.Configuration) (*grpc.ClientConn, error) {
	if cfg.DnsDiscover || len(cfg.GossipSeeds) > 0 || cfg.Address == "" {
		return nil, nil
	}
	creds := insecure.NewCredentials()
	if !cfg.DisableTLS {
		tc := &tls.Config{RootCAs: cfg.RootCAs, InsecureSkipVerify: cfg.SkipCertificateVerification} // #nosec G402 -- the connection string's tlsVerifyCert=false, as the client honours it
		if cfg.UserCertFile != "" {
			cert, err := tls.LoadX509KeyPair(cfg.UserCertFile, cfg.UserKeyFile)
			if err != nil {
				return nil, fmt.Errorf("user certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		creds = credentials.NewTLS(tc)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if cfg.Username != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(basicAuth{user: cfg.Username, password: cfg.Password, secure: !cfg.DisableTLS}))
	}
	return grpc.NewClient(cfg.Address, opts...)
}

// basicAuth sends the connection string's user and password with every
// call, as the client does.
type basicAuth struct {
	user, password string
	secure         bool
}

func (b basicAuth) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(b.user+":"+b.password))}, nil
}

func (b basicAuth) RequireTransportSecurity() bool { return b.secure }
