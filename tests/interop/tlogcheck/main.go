// Command tlogcheck is the independent side of evstore's interoperability tests: it verifies
// evstore's signed notes, checkpoints, cosignatures and Merkle proofs with Go's
// golang.org/x/mod/sumdb/note and sumdb/tlog, and makes its own for evstore to verify.
// It shares no code with evstore: the checkpoint body and the tlog-cosignature v1 (0x04) key,
// signer and verifier are written here from the C2SP texts, because sumdb/note knows only 0x01.
//
// One JSON request on stdin, one JSON answer on stdout:
//
//	{"op": "verify", "log_vkey": "...", "witness_vkeys": ["..."], "proof": {proof file}}
//	  -> {"ok": true, "cosigned_by": [...]} or {"ok": false, "error": "..."}
//	{"op": "make", "origin": "...", "witness_name": "...", "leaves": ["<hex>"...], "index": i,
//	 "old": m, "timestamp": t}
//	  -> {"log_vkey", "witness_vkey", "inclusion": {proof file}, "consistency": {proof file},
//	      "note": "<a plain signed note>"}
//	{"op": "keygen", "origin": "..."} -> {"skey", "vkey"}
//	{"op": "submit", "url": "...", "skey": "...", "witness_vkeys": ["..."], "leaves": [...],
//	 "steps": [[old, new], ...]}
//	  -> {"answers": [{"status": 200, "cosigned": true, "body": "..."}, ...]}: a tlog-witness client
//	     (request bodies, checkpoints and proofs made here; cosignatures checked here)
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const algCosignatureV1 = 0x04

type request struct {
	Op           string          `json:"op"`
	LogVkey      string          `json:"log_vkey"`
	WitnessVkeys []string        `json:"witness_vkeys"`
	Proof        json.RawMessage `json:"proof"`
	Origin       string          `json:"origin"`
	WitnessName  string          `json:"witness_name"`
	Leaves       []string        `json:"leaves"`
	Index        int64           `json:"index"`
	Old          int64           `json:"old"`
	Timestamp    uint64          `json:"timestamp"`
	URL          string          `json:"url"`
	Skey         string          `json:"skey"`
	Steps        [][2]int64      `json:"steps"`
}

type proofFile struct {
	LeafIndex     *int64   `json:"leaf_index,omitempty"`
	TreeSize      *int64   `json:"tree_size,omitempty"`
	EventHash     string   `json:"event_hash,omitempty"`
	Inclusion     []string `json:"inclusion,omitempty"`
	Checkpoint    string   `json:"checkpoint,omitempty"`
	OldSize       *int64   `json:"old_size,omitempty"`
	NewSize       *int64   `json:"new_size,omitempty"`
	Consistency   []string `json:"consistency,omitempty"`
	OldCheckpoint string   `json:"old_checkpoint,omitempty"`
	NewCheckpoint string   `json:"new_checkpoint,omitempty"`
}

// keyHash is SHA-256(name || 0x0A || alg || key)[:4], big-endian (signed-note).
func keyHash(name string, alg byte, key []byte) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte("\n"))
	h.Write([]byte{alg})
	h.Write(key)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// cosigMessage is the tlog-cosignature v1 signed message.
func cosigMessage(t uint64, body []byte) []byte {
	return append([]byte(fmt.Sprintf("cosignature/v1\ntime %d\n", t)), body...)
}

type cosigVerifier struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

func (v *cosigVerifier) Name() string    { return v.name }
func (v *cosigVerifier) KeyHash() uint32 { return v.hash }
func (v *cosigVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig[:8])
	return ed25519.Verify(v.key, cosigMessage(t, msg), sig[8:])
}

func newCosigVerifier(vkey string) (*cosigVerifier, error) {
	parts := strings.SplitN(strings.TrimSpace(vkey), "+", 3)
	if len(parts) != 3 {
		return nil, errors.New("malformed cosignature vkey")
	}
	h, err := strconv.ParseUint(parts[1], 16, 32)
	if err != nil || len(parts[1]) != 8 {
		return nil, errors.New("malformed cosignature vkey hash")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != algCosignatureV1 {
		return nil, errors.New("not an Ed25519 cosignature (0x04) vkey")
	}
	if keyHash(parts[0], algCosignatureV1, raw[1:]) != uint32(h) {
		return nil, errors.New("cosignature vkey hash mismatch")
	}
	return &cosigVerifier{parts[0], uint32(h), ed25519.PublicKey(raw[1:])}, nil
}

type cosigSigner struct {
	name string
	hash uint32
	priv ed25519.PrivateKey
	t    uint64
}

func (s *cosigSigner) Name() string    { return s.name }
func (s *cosigSigner) KeyHash() uint32 { return s.hash }
func (s *cosigSigner) Sign(msg []byte) ([]byte, error) {
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], s.t)
	return append(ts[:], ed25519.Sign(s.priv, cosigMessage(s.t, msg))...), nil
}

// parseCheckpoint reads origin, size and root of a tlog-checkpoint body.
func parseCheckpoint(text string) (string, int64, tlog.Hash, error) {
	var h tlog.Hash
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if !strings.HasSuffix(text, "\n") || len(lines) < 3 || lines[0] == "" {
		return "", 0, h, errors.New("malformed checkpoint")
	}
	n, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != lines[1] {
		return "", 0, h, errors.New("malformed checkpoint size")
	}
	h, err = tlog.ParseHash(lines[2])
	if err != nil {
		return "", 0, h, errors.New("malformed checkpoint root")
	}
	return lines[0], n, h, nil
}

func openCheckpoint(text string, logV note.Verifier, witnesses []note.Verifier) (int64, tlog.Hash, []string, error) {
	var h tlog.Hash
	n, err := note.Open([]byte(text), note.VerifierList(append([]note.Verifier{logV}, witnesses...)...))
	if err != nil {
		return 0, h, nil, fmt.Errorf("note: %v", err)
	}
	var logSigned bool
	var cosigned []string
	for _, s := range n.Sigs {
		if s.Name == logV.Name() && s.Hash == logV.KeyHash() {
			logSigned = true
		} else {
			cosigned = append(cosigned, s.Name)
		}
	}
	if !logSigned {
		return 0, h, nil, errors.New("not signed by the log key")
	}
	if len(cosigned) != len(witnesses) {
		return 0, h, nil, fmt.Errorf("cosigned by %v, want all of %d witnesses", cosigned, len(witnesses))
	}
	origin, size, root, err := parseCheckpoint(n.Text)
	if err != nil {
		return 0, h, nil, err
	}
	if origin != logV.Name() {
		return 0, h, nil, fmt.Errorf("origin %q is not the log key's name %q", origin, logV.Name())
	}
	return size, root, cosigned, nil
}

func hashes(values []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(values))
	for i, v := range values {
		h, err := tlog.ParseHash(v)
		if err != nil {
			return nil, fmt.Errorf("hash %d: %v", i, err)
		}
		out[i] = h
	}
	return out, nil
}

func verify(req request) (map[string]any, error) {
	logV, err := note.NewVerifier(strings.TrimSpace(req.LogVkey))
	if err != nil {
		return nil, fmt.Errorf("log vkey: %v", err)
	}
	var witnesses []note.Verifier
	for _, w := range req.WitnessVkeys {
		v, err := newCosigVerifier(w)
		if err != nil {
			return nil, err
		}
		witnesses = append(witnesses, v)
	}
	var p proofFile
	if err := json.Unmarshal(req.Proof, &p); err != nil {
		return nil, err
	}
	if p.Inclusion != nil || p.LeafIndex != nil {
		size, root, cosigned, err := openCheckpoint(p.Checkpoint, logV, witnesses)
		if err != nil {
			return nil, err
		}
		if p.TreeSize == nil || *p.TreeSize != size || p.LeafIndex == nil {
			return nil, errors.New("tree size does not match the checkpoint")
		}
		data, err := hex.DecodeString(p.EventHash)
		if err != nil {
			return nil, err
		}
		proof, err := hashes(p.Inclusion)
		if err != nil {
			return nil, err
		}
		if err := tlog.CheckRecord(tlog.RecordProof(proof), size, root, *p.LeafIndex, tlog.RecordHash(data)); err != nil {
			return nil, fmt.Errorf("inclusion: %v", err)
		}
		return map[string]any{"ok": true, "kind": "inclusion", "cosigned_by": cosigned}, nil
	}
	oldSize, oldRoot, _, err := openCheckpoint(p.OldCheckpoint, logV, nil)
	if err != nil {
		return nil, fmt.Errorf("old checkpoint: %v", err)
	}
	newSize, newRoot, cosigned, err := openCheckpoint(p.NewCheckpoint, logV, witnesses)
	if err != nil {
		return nil, fmt.Errorf("new checkpoint: %v", err)
	}
	if p.OldSize == nil || p.NewSize == nil || *p.OldSize != oldSize || *p.NewSize != newSize {
		return nil, errors.New("sizes do not match the checkpoints")
	}
	proof, err := hashes(p.Consistency)
	if err != nil {
		return nil, err
	}
	if oldSize == newSize {
		if len(proof) != 0 || oldRoot != newRoot {
			return nil, errors.New("consistency: same size, different roots or a proof")
		}
	} else if err := tlog.CheckTree(tlog.TreeProof(proof), newSize, newRoot, oldSize, oldRoot); err != nil {
		return nil, fmt.Errorf("consistency: %v", err)
	}
	return map[string]any{"ok": true, "kind": "consistency", "cosigned_by": cosigned}, nil
}

func hashStrings(hs []tlog.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.String()
	}
	return out
}

func make_(req request) (map[string]any, error) {
	skey, vkey, err := note.GenerateKey(rand.Reader, req.Origin)
	if err != nil {
		return nil, err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	wkeyHash := keyHash(req.WitnessName, algCosignatureV1, pub)
	wvkey := fmt.Sprintf("%s+%08x+%s", req.WitnessName, wkeyHash,
		base64.StdEncoding.EncodeToString(append([]byte{algCosignatureV1}, pub...)))
	cosigner := &cosigSigner{req.WitnessName, wkeyHash, priv, req.Timestamp}

	var storage []tlog.Hash
	reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = storage[x]
		}
		return out, nil
	})
	leaves := make([][]byte, len(req.Leaves))
	for i, l := range req.Leaves {
		if leaves[i], err = hex.DecodeString(l); err != nil {
			return nil, err
		}
		hs, err := tlog.StoredHashes(int64(i), leaves[i], reader)
		if err != nil {
			return nil, err
		}
		storage = append(storage, hs...)
	}
	n := int64(len(leaves))
	checkpoint := func(size int64, cosign bool) (string, error) {
		th, err := tlog.TreeHash(size, reader)
		if err != nil {
			return "", err
		}
		body := fmt.Sprintf("%s\n%d\n%s\n", req.Origin, size, th)
		signers := []note.Signer{signer}
		if cosign {
			signers = append(signers, cosigner)
		}
		msg, err := note.Sign(&note.Note{Text: body}, signers...)
		return string(msg), err
	}
	newCp, err := checkpoint(n, true)
	if err != nil {
		return nil, err
	}
	oldCp, err := checkpoint(req.Old, false)
	if err != nil {
		return nil, err
	}
	rp, err := tlog.ProveRecord(n, req.Index, reader)
	if err != nil {
		return nil, err
	}
	tp, err := tlog.ProveTree(n, req.Old, reader)
	if err != nil {
		return nil, err
	}
	idx, size, old := req.Index, n, req.Old
	plain, err := note.Sign(&note.Note{Text: "Ognuno sta solo sul cuor della terra\n"}, signer)
	if err != nil {
		return nil, err
	}
	return map[string]any{
		"log_vkey": vkey, "witness_vkey": wvkey, "note": string(plain),
		"inclusion": proofFile{LeafIndex: &idx, TreeSize: &size, EventHash: hex.EncodeToString(leaves[idx]),
			Inclusion: hashStrings(rp), Checkpoint: newCp},
		"consistency": proofFile{OldSize: &old, NewSize: &size, Consistency: hashStrings(tp),
			OldCheckpoint: oldCp, NewCheckpoint: newCp},
	}, nil
}

// tree stores the hashes of leaves (hex) and returns a reader over them.
func tree(hexLeaves []string) (tlog.HashReader, error) {
	var storage []tlog.Hash
	reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = storage[x]
		}
		return out, nil
	})
	for i, l := range hexLeaves {
		data, err := hex.DecodeString(l)
		if err != nil {
			return nil, err
		}
		hs, err := tlog.StoredHashes(int64(i), data, reader)
		if err != nil {
			return nil, err
		}
		storage = append(storage, hs...)
	}
	return reader, nil
}

func submit(req request) (map[string]any, error) {
	signer, err := note.NewSigner(req.Skey)
	if err != nil {
		return nil, err
	}
	var witnesses []note.Verifier
	for _, w := range req.WitnessVkeys {
		v, err := newCosigVerifier(w)
		if err != nil {
			return nil, err
		}
		witnesses = append(witnesses, v)
	}
	reader, err := tree(req.Leaves)
	if err != nil {
		return nil, err
	}
	var answers []map[string]any
	for _, step := range req.Steps {
		old, n := step[0], step[1]
		th, err := tlog.TreeHash(n, reader)
		if err != nil {
			return nil, err
		}
		signed, err := note.Sign(&note.Note{Text: fmt.Sprintf("%s\n%d\n%s\n", signer.Name(), n, th)}, signer)
		if err != nil {
			return nil, err
		}
		var body bytes.Buffer
		fmt.Fprintf(&body, "old %d\n", old)
		if old > 0 && old < n {
			proof, err := tlog.ProveTree(n, old, reader)
			if err != nil {
				return nil, err
			}
			for _, h := range proof {
				fmt.Fprintf(&body, "%s\n", h)
			}
		}
		body.WriteString("\n")
		body.Write(signed)
		resp, err := http.Post(strings.TrimSuffix(req.URL, "/")+"/add-checkpoint", "text/plain", &body)
		if err != nil {
			return nil, err
		}
		content, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		answer := map[string]any{"status": resp.StatusCode, "body": string(content),
			"content_type": resp.Header.Get("Content-Type"), "cosigned": false}
		if resp.StatusCode == 200 {
			opened, err := note.Open(append(signed, content...), note.VerifierList(witnesses...))
			answer["cosigned"] = err == nil && len(opened.Sigs) == len(witnesses)
			if err != nil {
				answer["error"] = err.Error()
			}
		}
		answers = append(answers, answer)
	}
	return map[string]any{"answers": answers}, nil
}

func main() {
	var req request
	dec := json.NewDecoder(os.Stdin)
	if err := dec.Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "bad request:", err)
		os.Exit(2)
	}
	var out map[string]any
	var err error
	switch req.Op {
	case "verify":
		out, err = verify(req)
	case "make":
		out, err = make_(req)
	case "keygen":
		var skey, vkey string
		skey, vkey, err = note.GenerateKey(rand.Reader, req.Origin)
		out = map[string]any{"skey": skey, "vkey": vkey}
	case "submit":
		out, err = submit(req)
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		out = map[string]any{"ok": false, "error": err.Error()}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(out)
	os.Stdout.Write(buf.Bytes())
}
