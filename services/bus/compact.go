package bus

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
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
	n := 1 + 1 + 16 + 6*binary.MaxVarintLen64 + 8*binary.MaxVarintLen32 +
		len(env.Stream) + len(env.Type) + len(env.Owner) + len(env.CorrelationID) + len(env.CausationID) + len(env.Writer) + len(env.Data) + len(env.Metadata)
	b := make([]byte, 0, n)
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
	m := message.NewMessage(env.ID.String(), b)
	m.Metadata.Set(MetaType, env.Type)
	m.Metadata.Set(MetaStream, env.Stream)
	m.Metadata.Set(MetaPosition, strconv.FormatUint(env.Position, 10))
	return m
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
