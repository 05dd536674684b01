package embedded

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// Log file header: magic, kind, format version. See doc.go.
const (
	logMagic        = "TRNSTILE"
	logKind         = "LOG\x00"
	formatVersion   = 2 // every record carries its chain hash
	formatVersionV1 = 1 // no hashes: upgraded to format 2 at Open (upgrade.go)
	headerSize      = 16
)

// Record layout. All integers are little-endian. See doc.go.
const (
	prefixSize = 8 // u32 body length + u32 CRC-32C

	offPosition  = 0
	offVersion   = 8
	offTime      = 16
	offID        = 24
	offSchema    = 40
	offInWrite   = 48
	offDataLen   = 52
	offMetaLen   = 56
	offFlags     = 60
	offOwner     = 61
	offStreamLen = 62
	offTypeLen   = 63
	offCorrLen   = 64
	offCausLen   = 65
	offWriterLen = 66
	offReserved  = 67
	offHash      = 68 // format 2: the event's chain hash (eventstore.NextHash), 32 bytes
	fixedBody    = 100

	// fixedBodyV1 is the fixed part of a format-1 body: format 2 without the hash.
	fixedBodyV1 = offHash

	// minBody is the smallest valid body: one-byte stream and type.
	minBody = fixedBody + 2
	// maxBody is the largest body the input limits allow.
	maxBody = fixedBody + eventstore.MaxStreamLen + eventstore.MaxTypeLen +
		3*eventstore.MaxCorrelationLen + eventstore.MaxEventSize
	// minRecord is the smallest record on disk.
	minRecord = prefixSize + minBody

	// The same for format 1.
	minBodyV1 = minBody - (fixedBody - fixedBodyV1)
	maxBodyV1 = maxBody - (fixedBody - fixedBodyV1)
)

// Record flags.
const (
	flagCommit  = 1 << 0 // last record of one Append or AppendMulti
	flagDataNil = 1 << 1 // Data was nil (not just empty)
	flagMetaNil = 1 << 2 // Metadata was nil (not just empty)
	knownFlags  = flagCommit | flagDataNil | flagMetaNil
	ownerAPI    = 1
	ownerExec   = 2
	ownerWorker = 3
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// logHeader returns the 16 bytes that open every log file.
func logHeader() []byte {
	h := make([]byte, headerSize)
	copy(h, logMagic)
	copy(h[8:], logKind)
	binary.LittleEndian.PutUint32(h[12:], formatVersion)
	return h
}

func ownerCode(o domain.Owner) byte {
	switch o {
	case domain.OwnerAPI:
		return ownerAPI
	case domain.OwnerExecutor:
		return ownerExec
	case domain.OwnerWorker:
		return ownerWorker
	}
	return 0
}

func ownerOf(c byte) (domain.Owner, bool) {
	switch c {
	case ownerAPI:
		return domain.OwnerAPI, true
	case ownerExec:
		return domain.OwnerExecutor, true
	case ownerWorker:
		return domain.OwnerWorker, true
	}
	return "", false
}

// recordSize is the size on disk of e stored in stream.
func recordSize(stream string, e *domain.Envelope) int {
	return prefixSize + fixedBody + len(stream) + len(e.Type) + len(e.CorrelationID) +
		len(e.CausationID) + len(e.Writer) + len(e.Data) + len(e.Metadata)
}

// appendRecord encodes e as one record at the end of buf and returns the
// extended buffer. The event must have passed eventstore.ValidateEvent and
// the stream eventstore.ValidateStream, so every length fits its field.
//
// inWrite counts the records before this one in the same write: recovery uses
// it to tell a torn last write from damage to an earlier one.
//
// hash is the event's chain hash.
func appendRecord(buf []byte, stream string, e *domain.Envelope, pos, version uint64, micros int64, inWrite uint32, commit bool, hash *domain.Hash) []byte {
	n := recordSize(stream, e)
	start := len(buf)
	if cap(buf)-start < n {
		nb := make([]byte, start, 2*cap(buf)+n)
		copy(nb, buf)
		buf = nb
	}
	buf = buf[:start+n]
	r := buf[start:]
	b := r[prefixSize:]
	le := binary.LittleEndian
	le.PutUint32(r[0:], uint32(n-prefixSize))
	le.PutUint64(b[offPosition:], pos)
	le.PutUint64(b[offVersion:], version)
	le.PutUint64(b[offTime:], uint64(micros))
	copy(b[offID:], e.ID[:])
	le.PutUint64(b[offSchema:], uint64(int64(e.SchemaVersion)))
	le.PutUint32(b[offInWrite:], inWrite)
	var flags byte
	if commit {
		flags |= flagCommit
	}
	if e.Data == nil {
		flags |= flagDataNil
	}
	if e.Metadata == nil {
		flags |= flagMetaNil
	}
	b[offFlags] = flags
	b[offOwner] = ownerCode(e.Owner)
	b[offStreamLen] = byte(len(stream))
	b[offTypeLen] = byte(len(e.Type))
	b[offCorrLen] = byte(len(e.CorrelationID))
	b[offCausLen] = byte(len(e.CausationID))
	b[offWriterLen] = byte(len(e.Writer))
	b[offReserved] = 0
	copy(b[offHash:fixedBody], hash[:])
	le.PutUint32(b[offDataLen:], uint32(len(e.Data)))
	le.PutUint32(b[offMetaLen:], uint32(len(e.Metadata)))
	i := fixedBody
	i += copy(b[i:], stream)
	i += copy(b[i:], e.Type)
	i += copy(b[i:], e.CorrelationID)
	i += copy(b[i:], e.CausationID)
	i += copy(b[i:], e.Writer)
	i += copy(b[i:], e.Data)
	copy(b[i:], e.Metadata)
	le.PutUint32(r[4:], recordCRC(r[0:4], b))
	return buf
}

func recordCRC(length, body []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, length), castagnoli, body)
}

// rec is a checked view of one record's bytes. Its slices alias the buffer
// the record was read into.
type rec struct {
	position, version uint64
	micros            int64
	id                uuid.UUID
	schema            int64
	inWrite           uint32
	flags             byte
	owner             domain.Owner
	stream, typ       []byte
	text              []byte // correlation id, causation id and writer, back to back
	corrLen, causLen  int
	payload           []byte // data then metadata
	dataLen           int
	hash              domain.Hash // the chain hash the record carries
}

// recordStatus says why bytes at some offset are not a record.
type recordStatus int

const (
	recOK       recordStatus = iota
	recShort                 // the bytes end before the record does (torn or end of log)
	recBadLen                // the length field is out of range (zero at the end of the log)
	recBadCRC                // the checksum does not match
	recBadShape              // the checksum matches but the fields do not add up
)

func (s recordStatus) String() string {
	switch s {
	case recShort:
		return "record cut short"
	case recBadLen:
		return "record length out of range"
	case recBadCRC:
		return "checksum mismatch"
	case recBadShape:
		return "malformed record"
	}
	return "ok"
}

// bodyBounds returns the sizes a record's body may have: lo..hi bytes, in a
// format-1 log (v1) or the current format.
func bodyBounds(v1 bool) (lo, hi uint32) {
	if v1 {
		return minBodyV1, maxBodyV1
	}
	return minBody, maxBody
}

// recordLen returns the total size of the record at the start of b as its
// length field says, or a status when b cannot hold a record of the format
// (v1 for a format-1 log).
func recordLen(b []byte, v1 bool) (int, recordStatus) {
	if len(b) < 4 {
		return 0, recShort
	}
	lo, hi := bodyBounds(v1)
	l := binary.LittleEndian.Uint32(b)
	if l < lo || l > hi {
		return 0, recBadLen
	}
	n := prefixSize + int(l)
	if len(b) < n {
		return n, recShort
	}
	return n, recOK
}

// parseRecordV1 checks and decodes the format-1 record at the start of b
// (a zero hash in r). r's slices alias *scratch, where the format-1 body is
// copied with room for the hash: valid until the next call with it.
func parseRecordV1(b []byte, r *rec, scratch *[]byte) (int, recordStatus) {
	n, st := recordLen(b, true)
	if st != recOK {
		return n, st
	}
	body := b[prefixSize:n]
	if recordCRC(b[0:4], body) != binary.LittleEndian.Uint32(b[4:]) {
		return n, recBadCRC
	}
	var zero domain.Hash
	v2 := append(append(append((*scratch)[:0], body[:fixedBodyV1]...), zero[:]...), body[fixedBodyV1:]...)
	*scratch = v2
	return n, decodeBody(v2, r)
}

// parseRecord checks and decodes the record at the start of b. It returns the
// record's total size on disk.
func parseRecord(b []byte, r *rec) (int, recordStatus) {
	n, st := recordLen(b, false)
	if st != recOK {
		return n, st
	}
	body := b[prefixSize:n]
	le := binary.LittleEndian
	if recordCRC(b[0:4], body) != le.Uint32(b[4:]) {
		return n, recBadCRC
	}
	if st := decodeBody(body, r); st != recOK {
		return n, st
	}
	return n, recOK
}

func decodeBody(body []byte, r *rec) recordStatus {
	le := binary.LittleEndian
	r.position = le.Uint64(body[offPosition:])
	r.version = le.Uint64(body[offVersion:])
	r.micros = int64(le.Uint64(body[offTime:]))
	copy(r.id[:], body[offID:offID+16])
	r.schema = int64(le.Uint64(body[offSchema:]))
	r.inWrite = le.Uint32(body[offInWrite:])
	r.flags = body[offFlags]
	copy(r.hash[:], body[offHash:fixedBody])
	var ok bool
	if r.owner, ok = ownerOf(body[offOwner]); !ok || r.flags&^knownFlags != 0 || body[offReserved] != 0 ||
		uint64(r.inWrite) > r.position {
		return recBadShape
	}
	ls, lt := int(body[offStreamLen]), int(body[offTypeLen])
	lc, lk, lw := int(body[offCorrLen]), int(body[offCausLen]), int(body[offWriterLen])
	ld, lm := int(le.Uint32(body[offDataLen:])), int(le.Uint32(body[offMetaLen:]))
	if ls == 0 || lt == 0 || ld+lm > eventstore.MaxEventSize ||
		r.flags&flagDataNil != 0 && ld > 0 || r.flags&flagMetaNil != 0 && lm > 0 ||
		fixedBody+ls+lt+lc+lk+lw+ld+lm != len(body) {
		return recBadShape
	}
	i := fixedBody
	r.stream = body[i : i+ls]
	i += ls
	r.typ = body[i : i+lt]
	i += lt
	r.text = body[i : i+lc+lk+lw]
	r.corrLen, r.causLen = lc, lk
	i += lc + lk + lw
	r.payload = body[i:]
	r.dataLen = ld
	return recOK
}

// commitTime converts a clock reading to what the log stores: microseconds
// since the Unix epoch.
func commitTime(t time.Time) int64 { return t.UnixMicro() }

// timeOf is the inverse of commitTime, in UTC.
func timeOf(micros int64) time.Time { return time.UnixMicro(micros).UTC() }

// corruptError builds the error Open and the readers return for bad bytes.
func corruptError(file string, off int64, what string) error {
	return fmt.Errorf("embedded: %s at offset %d: %s: %w", file, off, what, eventstore.ErrCorrupt)
}
