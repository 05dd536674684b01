package bus

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
)

// compactTag starts a payload made by EncodeEventCompact. A JSON payload
// never starts with it (JSON text starts with a value or white space).
const compactTag = 0x01

// Flags of a compact payload.
const (
	compactTimeSet = 1 << iota
	compactDataSet
	compactMetaSet
)

// EncodeEventCompact is EncodeEvent with a binary payload instead of JSON:
// the same message UUID and metadata, the envelope's fields as they are
// (data and metadata byte for byte, the time to the nanosecond, in UTC).
// It costs a fraction of EncodeEvent and of its decoding, which matters on
// the path of every handoff; DecodeEvent reads both forms. The forwarder
// uses it for the topics only turnstile's own handlers read; feeds for
// others stay JSON.
func EncodeEventCompact(env *domain.Envelope) *message.Message {
	m := message.NewMessage(env.ID.String(), appendCompact(make([]byte, 0, compactSize(env)), env))
	m.Metadata.Set(MetaType, env.Type)
	m.Metadata.Set(MetaStream, env.Stream)
	m.Metadata.Set(MetaPosition, strconv.FormatUint(env.Position, 10))
	return m
}

// compactSize bounds the length of env's compact form.
func compactSize(env *domain.Envelope) int {
	return 1 + 1 + 16 + 6*binary.MaxVarintLen64 + 8*binary.MaxVarintLen32 +
		len(env.Stream) + len(env.Type) + len(env.Owner) + len(env.CorrelationID) + len(env.CausationID) + len(env.Writer) + len(env.Data) + len(env.Metadata)
}

// appendCompact appends env's compact form to b.
func appendCompact(b []byte, env *domain.Envelope) []byte {
	var flags byte
	if !env.Time.IsZero() {
		flags |= compactTimeSet
	}
	if env.Data != nil {
		flags |= compactDataSet
	}
	if env.Metadata != nil {
		flags |= compactMetaSet
	}
	b = append(b, compactTag, flags)
	b = append(b, env.ID[:]...)
	b = binary.AppendUvarint(b, env.Version)
	b = binary.AppendUvarint(b, env.Position)
	b = binary.AppendVarint(b, int64(env.SchemaVersion))
	if flags&compactTimeSet != 0 {
		b = binary.AppendVarint(b, env.Time.Unix())
		b = binary.AppendUvarint(b, uint64(env.Time.Nanosecond()))
	}
	for _, s := range [...]string{env.Stream, env.Type, string(env.Owner), env.CorrelationID, env.CausationID, env.Writer} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, p := range [...][]byte{env.Data, env.Metadata} {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// batchTag starts a payload made by EncodeEvents for several events.
const batchTag = 0x02

// MetaCount is the metadata key of the number of events in a message made
// by EncodeEvents (absent: one).
const MetaCount = "count"

// MaxBatch is the most events EncodeEvents puts in one message.
const MaxBatch = 512

// EncodeEvents puts events (1 to MaxBatch) in one message, so that a burst
// of handoffs to one worker costs one message. For one event it is
// EncodeEventCompact's message. For several, the payload is their compact
// forms, each after its length; the message UUID derives from all their ids
// (the same events give the same UUID), and the metadata describe the first
// event and give the count. Handlers stay idempotent by event id: a message
// delivered again delivers each of its events again.
func EncodeEvents(envs []*domain.Envelope) *message.Message {
	if len(envs) == 1 {
		return EncodeEventCompact(envs[0])
	}
	if len(envs) == 0 || len(envs) > MaxBatch {
		panic(fmt.Sprintf("bus: EncodeEvents of %d events (want 1 to %d)", len(envs), MaxBatch))
	}
	n := 1 + binary.MaxVarintLen64
	ids := make([]byte, 0, 16*len(envs))
	for _, env := range envs {
		n += binary.MaxVarintLen64 + compactSize(env)
		ids = append(ids, env.ID[:]...)
	}
	b := binary.AppendUvarint(append(make([]byte, 0, n), batchTag), uint64(len(envs)))
	var one []byte
	for _, env := range envs {
		one = appendCompact(one[:0], env)
		b = binary.AppendUvarint(b, uint64(len(one)))
		b = append(b, one...)
	}
	m := message.NewMessage(uuid.NewSHA1(envs[0].ID, ids).String(), b)
	m.Metadata.Set(MetaType, envs[0].Type)
	m.Metadata.Set(MetaStream, envs[0].Stream)
	m.Metadata.Set(MetaPosition, strconv.FormatUint(envs[0].Position, 10))
	m.Metadata.Set(MetaCount, strconv.Itoa(len(envs)))
	return m
}

// DecodeEvents reads back the events of a message made by EncodeEvents,
// EncodeEventCompact or EncodeEvent, in order. A malformed payload is an
// error, whatever part of it is sound.
func DecodeEvents(m *message.Message) ([]domain.Envelope, error) {
	p := m.Payload
	if len(p) == 0 || p[0] != batchTag {
		env, err := DecodeEvent(m)
		if err != nil {
			return nil, err
		}
		return []domain.Envelope{env}, nil
	}
	bad := func(why string) error { return fmt.Errorf("bus: message %s is not a batch of events: %s", m.UUID, why) }
	count, k := binary.Uvarint(p[1:])
	if k <= 0 || count < 2 || count > MaxBatch {
		return nil, bad("bad count")
	}
	p = p[1+k:]
	out := make([]domain.Envelope, 0, count)
	for range count {
		l, k := binary.Uvarint(p)
		if k <= 0 || l > uint64(len(p)-k) {
			return nil, bad("bad length")
		}
		env, err := decodeCompact(p[k : k+int(l)])
		if err != nil {
			return nil, bad(err.Error())
		}
		if env.Type == "" || env.Stream == "" {
			return nil, bad("an event with no type or stream")
		}
		out = append(out, env)
		p = p[k+int(l):]
	}
	if len(p) != 0 {
		return nil, bad("trailing bytes")
	}
	return out, nil
}

var errCompact = errors.New("malformed compact event")

// decodeCompact reads a payload made by EncodeEventCompact.
func decodeCompact(p []byte) (domain.Envelope, error) {
	var env domain.Envelope
	if len(p) < 2+16 || p[0] != compactTag {
		return env, errCompact
	}
	flags := p[1]
	if flags&^(compactTimeSet|compactDataSet|compactMetaSet) != 0 {
		return env, errCompact
	}
	copy(env.ID[:], p[2:18])
	p = p[18:]
	uv := func() uint64 {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			p = nil
			return 0
		}
		p = p[n:]
		return v
	}
	field := func() []byte {
		l := uv()
		if p == nil || l > uint64(len(p)) {
			p = nil
			return nil
		}
		out := p[:l:l]
		p = p[l:]
		return out
	}
	env.Version = uv()
	env.Position = uv()
	sv, n := binary.Varint(p)
	if n <= 0 || sv != int64(int(sv)) {
		return env, errCompact
	}
	p = p[n:]
	env.SchemaVersion = int(sv)
	if flags&compactTimeSet != 0 {
		sec, n := binary.Varint(p)
		if n <= 0 {
			return env, errCompact
		}
		p = p[n:]
		ns := uv()
		if p == nil || ns >= uint64(time.Second) {
			return env, errCompact
		}
		env.Time = time.Unix(sec, int64(ns)).UTC()
	}
	var fields [6]string
	for i := range fields {
		b := field()
		if p == nil {
			return env, errCompact
		}
		fields[i] = string(b)
	}
	env.Stream, env.Type, env.Owner = fields[0], fields[1], domain.Owner(fields[2])
	env.CorrelationID, env.CausationID, env.Writer = fields[3], fields[4], fields[5]
	data := field()
	if p == nil {
		return env, errCompact
	}
	meta := field()
	if p == nil || len(p) != 0 {
		return env, errCompact
	}
	if flags&compactDataSet != 0 {
		env.Data = append([]byte{}, data...)
	} else if len(data) > 0 {
		return env, errCompact
	}
	if flags&compactMetaSet != 0 {
		env.Metadata = append([]byte{}, meta...)
	} else if len(meta) > 0 {
		return env, errCompact
	}
	return env, nil
}
