// TLS 1.3 only, for every TLS channel and server of this process
// (docs/DESIGN.md, "Security").
//
// gRPC 1.51's C++ API has no knob for the protocol version, and its OpenSSL
// transport sets each context's minimum to TLS 1.2 itself, over anything a
// MinProtocol in an OpenSSL configuration says. What it leaves alone is the
// context's options, which OpenSSL takes from its configuration's
// system_default section when the context is made: RequireTls13 loads such a
// section (MinProtocol = TLSv1.3 and Protocol = -TLSv1.2, i.e.
// SSL_OP_NO_TLSv1_2) into this process's OpenSSL, once, before any context
// exists. A peer that offers TLS 1.2 at most then fails its handshake.
//
//   RETURN_IF_ERROR(RequireTls13());   // before building TLS credentials
//
// Thread-safe; every call after the first returns the first one's result.
#ifndef ZEROSHARD_WIRE_TLS_VERSION_H_
#define ZEROSHARD_WIRE_TLS_VERSION_H_

#include "absl/status/status.h"

namespace zeroshard {

absl::Status RequireTls13();

}  // namespace zeroshard

#endif  // ZEROSHARD_WIRE_TLS_VERSION_H_
