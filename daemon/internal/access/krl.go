// The key revocation list sshd reads (RevokedKeys), in OpenSSH's KRL format
// (PROTOCOL.krl of OpenSSH): the header, then a section of explicitly
// revoked keys (a plain key revokes every certificate of that key too)
// and one section of revoked certificate serials per CA. Hand-written: no
// Go library writes KRLs (x/crypto/ssh reads keys and certificates only),
// and the format is a header and two kinds of sections; ssh-keygen -Q
// reads what this writes in the tests.

package access

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strconv"

	"golang.org/x/crypto/ssh"
)

// The KRL format's constants (PROTOCOL.krl).
const (
	krlMagic           = 0x5353484b524c0a00 // "SSHKRL\n\0"
	krlFormatVersion   = 1
	krlSectionCerts    = 1
	krlSectionExplicit = 2
	krlCertSerialList  = 0x20
	krlCommentPrefix   = "bcd access section, generation "
)

// RevokedSerials are the revoked certificate serials of one CA.
type RevokedSerials struct {
	CA      ssh.PublicKey
	Serials []uint64
}

// KRL encodes a KRL of version `version` (the spec generation: sshd takes
// any) revoking keys and the serials of each CA. The bytes are a function
// of the arguments: keys and serials are sorted, and the generation date
// is 0 (not recorded).
func KRL(version uint64, keys []ssh.PublicKey, serials []RevokedSerials) []byte {
	var out bytes.Buffer
	u32 := func(b *bytes.Buffer, v uint32) { _ = binary.Write(b, binary.BigEndian, v) }
	u64 := func(b *bytes.Buffer, v uint64) { _ = binary.Write(b, binary.BigEndian, v) }
	str := func(b *bytes.Buffer, s []byte) {
		u32(b, uint32(len(s)))
		b.Write(s)
	}
	u64(&out, krlMagic)
	u32(&out, krlFormatVersion)
	u64(&out, version)
	u64(&out, 0) // generated_date
	u64(&out, 0) // flags
	str(&out, nil)
	str(&out, []byte(krlCommentPrefix+strconv.FormatUint(version, 10)))
	for _, s := range serials {
		list := slices.Clone(s.Serials)
		slices.Sort(list)
		list = slices.Compact(list)
		var sub, section bytes.Buffer
		for _, n := range list {
			u64(&sub, n)
		}
		str(&section, s.CA.Marshal())
		str(&section, nil) // reserved
		section.WriteByte(krlCertSerialList)
		str(&section, sub.Bytes())
		out.WriteByte(krlSectionCerts)
		str(&out, section.Bytes())
	}
	if len(keys) > 0 {
		blobs := make([][]byte, 0, len(keys))
		for _, k := range keys {
			blobs = append(blobs, k.Marshal())
		}
		slices.SortFunc(blobs, bytes.Compare)
		blobs = slices.CompactFunc(blobs, bytes.Equal)
		var section bytes.Buffer
		for _, b := range blobs {
			str(&section, b)
		}
		out.WriteByte(krlSectionExplicit)
		str(&out, section.Bytes())
	}
	return out.Bytes()
}
