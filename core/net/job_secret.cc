#include "core/net/job_secret.h"

#include <algorithm>
#include <cstring>

#include "core/net/sha256.h"

namespace collie {
namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

Status checkJobSecret(const JobSecret& secret, std::string_view source) {
  if (std::all_of(secret.begin(), secret.end(), [](uint8_t b) { return b == 0; })) {
    return invalidArgument(std::string(source) +
                           ": the job secret is all zeros, which is no secret; use " +
                           kJobSecretForm);
  }
  return Status();
}

Result<JobSecret> jobSecretFromUserText(std::string_view text, std::string_view source) {
  while (!text.empty() && isSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && isSpace(text.back())) text.remove_suffix(1);
  Result<JobSecret> secret = secretFromHex(std::string(text));
  if (!secret.isOk()) {
    // The text itself is not repeated: a mistyped secret is still mostly secret.
    return invalidArgument(
        std::string(source) + " is not a job secret (" + std::to_string(text.size()) +
        " characters, " +
        (text.size() == 2 * kJobSecretBytes ? "not all hex digits" : "expected 32") +
        "); refusing to run unauthenticated. Use " + kJobSecretForm);
  }
  COLLIE_RETURN_IF_ERROR(checkJobSecret(*secret, source));
  return secret;
}

std::string publicJobTag(const JobSecret& secret) {
  Sha256Digest digest =
      Sha256().update("collie public job tag v1").update(secret.data(), secret.size()).finish();
  JobSecret first;
  std::memcpy(first.data(), digest.data(), first.size());
  return secretToHex(first).substr(0, 16);
}

JobSecret deriveJobSecret(const JobSecret& parent, std::string_view label) {
  const uint32_t labelBytes = static_cast<uint32_t>(label.size());
  Sha256Digest digest = Sha256()
                            .update("collie derived secret v1")
                            .update(parent.data(), parent.size())
                            .update(&labelBytes, sizeof(labelBytes))
                            .update(label)
                            .finish();
  JobSecret child;
  std::memcpy(child.data(), digest.data(), child.size());
  return child;
}

}  // namespace collie
