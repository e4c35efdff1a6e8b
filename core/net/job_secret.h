// The job secret as users hand it in, and everything collie derives from it.
//
// A job secret is 16 random bytes that every rank of a job shares (UniqueId). It
// authenticates every connection (core/net/handshake.h), so collie never runs with a
// default, zero or malformed one: the functions here refuse such secrets with an error
// naming where the secret came from and the form expected, and never print the text
// they were given. Nothing public (store keys, names in errors and logs) holds secret
// bits: public tags and derived secrets go through SHA-256 (core/net/sha256.h).
//
// Pure functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "collie/unique_id.h"

namespace collie {

// The message every refusal below ends with: the form a secret must take.
inline constexpr const char* kJobSecretForm =
    "32 hex digits of random bytes, e.g. $(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')";

// OK unless every byte is zero (the value of a secret nobody set).
Status checkJobSecret(const JobSecret& secret, std::string_view source);

// Parses a secret a user typed (an environment variable, a file's first line):
// surrounding whitespace is dropped; anything but 32 hex digits of a non-zero value is
// InvalidArgument naming `source`.
Result<JobSecret> jobSecretFromUserText(std::string_view text, std::string_view source);

// A public name for the job: 16 hex digits of SHA-256 over a domain label and the
// secret. Equal secrets give equal tags; the tag reveals nothing of the secret.
std::string publicJobTag(const JobSecret& secret);

// A secret for a child communicator (split, shrink): the first 16 bytes of SHA-256
// over a domain label, the parent's secret and `label`. Knowing children's secrets
// reveals nothing of the parent's or of other children's.
JobSecret deriveJobSecret(const JobSecret& parent, std::string_view label);

}  // namespace collie
