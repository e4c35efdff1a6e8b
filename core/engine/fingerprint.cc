#include "core/engine/fingerprint.h"

#include <cstdio>

namespace collie {

namespace {
uint64_t hashCount(uint64_t count) {
  uint64_t x = count * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return x & 0xFFFFF;
}

// A fingerprint carries send and recv as one kind (the two halves of one operation), so
// it cannot say which half a rank posted: name both.
std::string kindName(CollectiveKind kind) {
  if (kind == CollectiveKind::kSend || kind == CollectiveKind::kRecv) return "send/recv";
  return std::string(collectiveName(kind));
}
}  // namespace

uint64_t makeFingerprint(uint64_t sequence, const CollectiveArgs& args) {
  // Send and recv are two halves of one operation; give them one kind.
  CollectiveKind kind = args.kind == CollectiveKind::kRecv ? CollectiveKind::kSend : args.kind;
  bool reduces = kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
                 kind == CollectiveKind::kReduce;
  bool rooted = kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce;
  uint64_t tag = (sequence & 0xFFFFF) << 44;
  tag |= (static_cast<uint64_t>(kind) & 0xF) << 40;
  tag |= (static_cast<uint64_t>(args.dtype) & 0xF) << 36;
  tag |= (reduces ? static_cast<uint64_t>(args.op) & 0xF : 0) << 32;
  tag |= (rooted ? static_cast<uint64_t>(args.root) & 0xFFF : 0) << 20;
  tag |= hashCount(args.count);
  return tag;
}

std::string describeFingerprint(uint64_t tag) {
  auto kind = static_cast<CollectiveKind>((tag >> 40) & 0xF);
  auto dtype = static_cast<DataType>((tag >> 36) & 0xF);
  auto op = static_cast<ReduceOp>((tag >> 32) & 0xF);
  char text[160];
  std::snprintf(text, sizeof(text), "collective #%llu %s dtype=%s op=%s root=%llu count#%05llx",
                static_cast<unsigned long long>(tag >> 44), kindName(kind).c_str(),
                std::string(dataTypeName(dtype)).c_str(), std::string(reduceOpName(op)).c_str(),
                static_cast<unsigned long long>((tag >> 20) & 0xFFF),
                static_cast<unsigned long long>(tag & 0xFFFFF));
  return text;
}

FingerprintFields decodeFingerprint(uint64_t tag) {
  FingerprintFields f;
  f.sequence = tag >> 44;
  f.kind = static_cast<CollectiveKind>((tag >> 40) & 0xF);
  f.dtype = static_cast<DataType>((tag >> 36) & 0xF);
  f.op = static_cast<ReduceOp>((tag >> 32) & 0xF);
  f.root = (tag >> 20) & 0xFFF;
  f.countHash = tag & 0xFFFFF;
  return f;
}

std::string describeMismatch(uint64_t mine, uint64_t theirs, int peer) {
  const FingerprintFields a = decodeFingerprint(mine);
  const FingerprintFields b = decodeFingerprint(theirs);
  const std::string them = "rank " + std::to_string(peer) + " ";
  std::string text;
  auto add = [&](const std::string& field, const std::string& ours, const std::string& theirs) {
    if (!text.empty()) text += "; ";
    text += field + " differs: this rank " + ours + ", " + them + theirs;
  };
  if (a.sequence != b.sequence) {
    add("sequence number", "#" + std::to_string(a.sequence),
        "#" + std::to_string(b.sequence) + " (one rank issued more collectives than the other)");
  }
  if (a.kind != b.kind) {
    add("kind", kindName(a.kind), kindName(b.kind));
  }
  if (a.dtype != b.dtype) {
    add("dtype", std::string(dataTypeName(a.dtype)), std::string(dataTypeName(b.dtype)));
  }
  if (a.op != b.op) add("op", std::string(reduceOpName(a.op)), std::string(reduceOpName(b.op)));
  if (a.root != b.root) add("root/peer", std::to_string(a.root), std::to_string(b.root));
  if (a.countHash != b.countHash) {
    char ours[16], theirs_[16];
    std::snprintf(ours, sizeof(ours), "count#%05llx", static_cast<unsigned long long>(a.countHash));
    std::snprintf(theirs_, sizeof(theirs_), "count#%05llx",
                  static_cast<unsigned long long>(b.countHash));
    add("count", ours, std::string(theirs_) + " (only a hash of the count travels)");
  }
  return text;
}

}  // namespace collie
