package vendors

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// Tagger is a vendor whose events echo a field the caller fills: the proxy
// has Tag write the vendor key there before it sends the request (a vendor
// that is no Tagger is sent its request as it came).
type Tagger interface {
	// Tag returns body with key written as the webhook tag for e, or body
	// unchanged; ErrForeignTag when the request must not be sent.
	Tag(e Effect, body []byte, key string) ([]byte, error)
}

// Webhook tags. Stripe's events echo the idempotency key of the request
// that caused them (request.idempotency_key), which is the vendor key
// Ratchet stamped. The other vendors' events echo no key, so the proxy
// writes the same vendor key where the vendor echoes a caller's tag back
// in its events, and package webhooks settles the effect by it:
//
//	vendor        request (operation)             tag                                   echoed in the event as
//	Square        square.payments.create          reference_id (≤ 40)                   data.object.payment.reference_id
//	Adyen         adyen.payments.create           metadata.ratchet_key                  additionalData["metadata.ratchet_key"]
//	Checkout.com  checkout.payments.create        metadata.ratchet_key                  data.metadata.ratchet_key
//	PayPal        paypal.orders.create            purchase_units[0].custom_id (≤ 127)   resource.custom_id (captures)
//
// metadata.ratchet_key is Ratchet's own field: the proxy always writes it
// itself, and a request whose caller filled it with anything but this
// request's vendor key is refused (ErrForeignTag; nothing is sent).
// Otherwise a caller could name another effect's vendor key (which the
// proxy hands back in Ratchet-Vendor-Key), and the vendor's signed
// decline of its own payment would settle that other effect failed,
// freeing its key for a second execution. A request whose body or
// metadata cannot be read unambiguously (not a JSON object, a member
// named twice) is refused too: the vendor might read a tag in it.
//
// reference_id, custom_id and the references (Adyen merchantReference,
// Checkout.com reference) are shared: the caller may use them for its own
// references, so a field the caller filled is kept, and package webhooks
// never settles an effect failed through a shared field (only succeeded);
// a failure settles only through Ratchet's own field or the echoed
// idempotency key. Only those four requests are tagged; a PayPal order
// with several purchase units, whose custom_id would be ambiguous, goes
// untagged. The tag is a 36-character UUID (vendors' key shape): no
// personal data, within every field's limit. Sources: package webhooks
// cites each vendor's event shape.
const TagMetadataKey = "ratchet_key"

// ErrForeignTag: the caller filled Ratchet's own tag field
// (metadata.ratchet_key) with something other than the request's vendor
// key, or sent a body in which Ratchet cannot tell.
var ErrForeignTag = errors.New("metadata." + TagMetadataKey + " is Ratchet's webhook tag, which the proxy writes itself: " +
	"leave it out (or send a body Ratchet can read: a JSON object with no member named twice)")

// tagMetadata writes key as metadata.ratchet_key (Adyen, Checkout.com).
func TagMetadata(body []byte, key string) ([]byte, error) {
	val, _ := json.Marshal(key)
	meta, _ := json.Marshal(map[string]string{TagMetadataKey: key})
	top, ok := ScanObject(body, 0)
	if !ok {
		return nil, ErrForeignTag
	}
	for name := range top.Members {
		if name != "metadata" && strings.EqualFold(name, "metadata") {
			return nil, ErrForeignTag // a vendor that matches names in any case reads two
		}
	}
	m, has := top.Members["metadata"]
	if !has {
		return insert(body, top, "metadata", meta), nil
	}
	if bytes.Equal(bytes.TrimSpace(body[m.Start:m.End]), []byte("null")) {
		return body, nil // no metadata: the vendor echoes no tag
	}
	inner, ok := ScanObject(body, m.Start)
	if !ok {
		return nil, ErrForeignTag
	}
	if v, has := inner.Members[TagMetadataKey]; has {
		var theirs string
		if json.Unmarshal(body[v.Start:v.End], &theirs) != nil || theirs != key {
			return nil, ErrForeignTag
		}
		return body, nil
	}
	// Adyen allows 20 metadata entries; a full one is left alone.
	if len(inner.Members) < 20 {
		return insert(body, inner, TagMetadataKey, val), nil
	}
	return body, nil
}

// span is where a JSON value starts and ends in a body.
type Span struct{ Start, End int }

// object is a scanned JSON object: where its first member would go (just
// after its '{'), and its members' values.
type Object struct {
	Open    int
	Members map[string]Span
}

// addMember adds name: val to the object at offset at (the top-level one
// when at is empty) unless it has a member of that name already.
func AddMember(body []byte, at []int, name string, val []byte) []byte {
	off := 0
	if len(at) > 0 {
		off = at[0]
	}
	obj, ok := ScanObject(body, off)
	if !ok {
		return body
	}
	if _, has := obj.Members[name]; has {
		return body
	}
	return insert(body, obj, name, val)
}

// insert writes "name":val as the first member of obj.
func insert(body []byte, obj Object, name string, val []byte) []byte {
	k, _ := json.Marshal(name)
	var out bytes.Buffer
	out.Write(body[:obj.Open])
	out.Write(k)
	out.WriteByte(':')
	out.Write(val)
	if len(obj.Members) > 0 {
		out.WriteByte(',')
	}
	out.Write(body[obj.Open:])
	return out.Bytes()
}

// scanObject reads the JSON object starting at off (after any
// whitespace). It refuses anything else, and an object with a repeated
// member name (which the vendor and Ratchet could read differently).
func ScanObject(body []byte, off int) (Object, bool) {
	dec := json.NewDecoder(bytes.NewReader(body[off:]))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return Object{}, false
	}
	obj := Object{Open: off + int(dec.InputOffset()), Members: map[string]Span{}}
	for dec.More() {
		tok, err := dec.Token()
		name, isName := tok.(string)
		if err != nil || !isName {
			return Object{}, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return Object{}, false
		}
		end := off + int(dec.InputOffset())
		if _, dup := obj.Members[name]; dup {
			return Object{}, false
		}
		obj.Members[name] = Span{end - len(raw), end}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return Object{}, false
	}
	return obj, true
}

// scanArray returns the offsets of the elements of the JSON array at off.
func ScanArray(body []byte, off int) ([]int, bool) {
	dec := json.NewDecoder(bytes.NewReader(body[off:]))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, false
	}
	var out []int
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		out = append(out, off+int(dec.InputOffset())-len(raw))
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim(']') {
		return nil, false
	}
	return out, true
}
