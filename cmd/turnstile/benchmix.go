package main

import (
	"encoding/json"
	"errors"
	"flag"
	"strconv"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/command"
)

// benchMix is what `bench lifecycle` mixes into its plain run: random
// priorities, a concurrency key with many values, and a total limit across
// them. Its zero value is the plain run.
type benchMix struct {
	priorities int   // requests get priorities 1..priorities (0: none set)
	keys       int   // actions get a concurrency_key; requests one of keys values (0: no key)
	total      int   // actions' max_concurrent_total (0: none; needs keys)
	seed       int64 // the priorities and key values drawn are a function of seed and the request's index
}

// benchMixKey is the input field the mixed run's actions name as their
// concurrency_key.
const benchMixKey = "tenant"

func addBenchMixFlags(fs *flag.FlagSet) *benchMix {
	m := &benchMix{}
	fs.IntVar(&m.priorities, "priorities", 0, "requests get priorities 1..N at random, seeded by --seed (1..4; 0: no priority set)")
	fs.IntVar(&m.keys, "keys", 0, "actions get a concurrency_key and requests one of K key values at random, seeded by --seed (--max-concurrent is then each value's limit; 0: no key)")
	fs.IntVar(&m.total, "total", 0, "actions get max_concurrent_total T across their key values (needs --keys; 0: none)")
	fs.Int64Var(&m.seed, "seed", 1, "seed of the priorities and key values drawn")
	return m
}

// check refuses values the run cannot use, as a usage error.
func (m *benchMix) check() error {
	switch {
	case m.priorities < 0 || m.priorities > domain.MaxPriority:
		return usageError{errors.New("--priorities must be between 0 and " + strconv.Itoa(domain.MaxPriority))}
	case m.keys < 0:
		return usageError{errors.New("--keys must be >= 0")}
	case m.total < 0 || m.total > domain.MaxConcurrentLimit:
		return usageError{errors.New("--total must be between 0 and " + strconv.Itoa(domain.MaxConcurrentLimit))}
	case m.total > 0 && m.keys == 0:
		return usageError{errors.New("--total needs --keys (max_concurrent_total bounds a concurrency key's values)")}
	}
	return nil
}

// policy adds the mix's key and total limit to an action's policy.
func (m *benchMix) policy(p domain.Policy) domain.Policy {
	if m.keys > 0 {
		p.ConcurrencyKey = benchMixKey
		p.MaxConcurrentTotal = m.total
	}
	return p
}

// request adds the mix's priority and key value to request i. What it draws
// depends on the seed and i only, not on which submitter sends it.
func (m *benchMix) request(r command.Request, i int64) command.Request {
	x := splitmix64(uint64(m.seed) ^ uint64(i)*0x9e3779b97f4a7c15)
	if m.priorities > 0 {
		r.Priority = 1 + int(x%uint64(m.priorities))
	}
	if m.keys > 0 {
		r.Input, _ = json.Marshal(map[string]string{benchMixKey: "v" + strconv.FormatUint((x>>32)%uint64(m.keys), 10)})
	}
	return r
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// perAction is how many executions of one action may run at once: its
// max_concurrent, or with a key its max_concurrent_total, or without one
// max_concurrent for each key value. The run's default worker slots come
// from it, so that a mixed run is bound by its limits and not by slots.
func (m *benchMix) perAction(maxConcurrent int) int {
	switch {
	case m.keys > 0 && m.total > 0:
		return m.total
	case m.keys > 0:
		return maxConcurrent * m.keys
	}
	return maxConcurrent
}
