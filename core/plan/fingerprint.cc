#include "core/plan/fingerprint.h"

#include <cstdio>

namespace collie {

namespace {
uint64_t hashCount(uint64_t count) {
  uint64_t x = count * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return x & 0xFFFFF;
}

// The v kinds: every rank's count, in rank order, folded into one word.
uint64_t hashCounts(const std::vector<size_t>& counts) {
  uint64_t h = 0xCBF29CE484222325ull ^ counts.size();
  for (size_t count : counts) h = (h ^ count) * 0x100000001B3ull + (h >> 31);
  return h;
}

// A fingerprint carries send and recv as one kind (the two halves of one operation), so
// it cannot say which half a rank posted: name both.
std::string kindName(CollectiveKind kind) {
  if (kind == CollectiveKind::kSend || kind == CollectiveKind::kRecv) return "send/recv";
  return std::string(collectiveName(kind));
}

std::string p2pKindName(const FingerprintFields& f) {
  if (f.envelope) return "tagged send/recv (envelope)";
  if (f.tagged) return "tagged send/recv";
  return "untagged send/recv";
}

std::string countText(uint64_t countHash) {
  char text[16];
  std::snprintf(text, sizeof(text), "count#%05llx", static_cast<unsigned long long>(countHash));
  return text;
}
}  // namespace

uint64_t makeFingerprint(uint64_t sequence, const CollectiveArgs& args) {
  // Send and recv are two halves of one operation; give them one kind.
  CollectiveKind kind = args.kind == CollectiveKind::kRecv ? CollectiveKind::kSend : args.kind;
  bool reduces = kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
                 kind == CollectiveKind::kReduce || kind == CollectiveKind::kReduceScatterV;
  uint64_t tag = (sequence & 0xFFFFF) << kFingerprintSequenceShift;
  tag |= (static_cast<uint64_t>(kind) & 0xF) << 40;
  tag |= (static_cast<uint64_t>(args.dtype) & 0xF) << 36;
  tag |= (reduces ? static_cast<uint64_t>(args.op) & 0xF : 0) << 32;
  tag |= (isRooted(kind) ? static_cast<uint64_t>(args.root) & 0xFFF : 0) << 20;
  tag |= hashCount(args.blocks ? hashCounts(args.blocks->counts) : args.count);
  return tag;
}

uint64_t makeTaggedFingerprint(uint64_t sequence, DataType dtype, size_t count) {
  CollectiveArgs args;
  args.kind = CollectiveKind::kSend;
  args.dtype = dtype;
  args.count = count;
  const uint64_t kindMask = 0xFull << 40;
  return (makeFingerprint(sequence, args) & ~kindMask) | (kTaggedKindBits << 40);
}

uint64_t envelopeFingerprint() { return kEnvelopeKindBits << 40; }

std::string describeFingerprint(uint64_t tag) {
  const FingerprintFields f = decodeFingerprint(tag);
  if (f.envelope) return "tagged send/recv envelope";
  const std::string dtype = "dtype=" + std::string(dataTypeName(f.dtype));
  const std::string count = countText(f.countHash);
  if (isPointToPoint(f.kind)) {
    return std::string(f.tagged ? "tagged " : "") + "send/recv #" + std::to_string(f.sequence) +
           " " + dtype + " " + count;
  }
  std::string text = "collective #" + std::to_string(f.sequence) + " " + kindName(f.kind) + " " +
                     dtype + " op=" + std::string(reduceOpName(f.op));
  if (isRooted(f.kind)) text += " root=" + std::to_string(f.root);
  return text + " " + count;
}

std::string describeOperation(uint64_t tag, const CollectiveArgs& args) {
  return describeOperation(tag, args, PointToPointTag{});
}

std::string describeOperation(uint64_t tag, const CollectiveArgs& args,
                              const PointToPointTag& p2p) {
  if (!isPointToPoint(args.kind)) return describeFingerprint(tag);
  const FingerprintFields f = decodeFingerprint(tag);
  const bool send = args.kind == CollectiveKind::kSend;
  return std::string(send ? "send #" : "recv #") + std::to_string(f.sequence) +
         (p2p.tagged ? " with tag " + std::to_string(p2p.value) : std::string()) +
         (send ? " to peer " : " from peer ") + std::to_string(args.peer) +
         " dtype=" + std::string(dataTypeName(f.dtype)) + " " + countText(f.countHash);
}

FingerprintFields decodeFingerprint(uint64_t tag) {
  FingerprintFields f;
  f.sequence = tag >> 44;
  const uint64_t kind = (tag >> 40) & 0xF;
  f.tagged = kind == kTaggedKindBits;
  f.envelope = kind == kEnvelopeKindBits;
  f.kind = f.tagged || f.envelope ? CollectiveKind::kSend : static_cast<CollectiveKind>(kind);
  f.dtype = static_cast<DataType>((tag >> 36) & 0xF);
  f.op = static_cast<ReduceOp>((tag >> 32) & 0xF);
  f.root = (tag >> 20) & 0xFFF;
  f.countHash = tag & 0xFFFFF;
  return f;
}

std::string describeMismatch(uint64_t mine, uint64_t theirs, int peer) {
  const FingerprintFields a = decodeFingerprint(mine);
  const FingerprintFields b = decodeFingerprint(theirs);
  const bool pointToPoint = isPointToPoint(a.kind) && isPointToPoint(b.kind);
  const std::string them = (pointToPoint ? "peer " : "rank ") + std::to_string(peer) + " ";
  std::string text;
  auto add = [&](const std::string& field, const std::string& ours, const std::string& theirs) {
    if (!text.empty()) text += "; ";
    text += field + " differs: this rank " + ours + ", " + them + theirs;
  };
  if (a.sequence != b.sequence) {
    add("sequence number", "#" + std::to_string(a.sequence),
        "#" + std::to_string(b.sequence) +
            (pointToPoint ? " (one rank posted more sends to the other than it posted receives)"
                          : " (one rank issued more collectives than the other)"));
  }
  if (a.kind != b.kind) {
    add("kind", kindName(a.kind), kindName(b.kind));
  } else if (pointToPoint && (a.tagged || a.envelope) != (b.tagged || b.envelope)) {
    // Only the kind says anything here: the other fields of an envelope are empty.
    text.clear();
    add("kind", p2pKindName(a),
        p2pKindName(b) +
            " (tagged and untagged point-to-point cannot be mixed between two ranks: tag "
            "every send and receive of the pair, or none)");
    return text;
  }
  if (a.dtype != b.dtype) {
    add("dtype", std::string(dataTypeName(a.dtype)), std::string(dataTypeName(b.dtype)));
  }
  if (a.op != b.op) add("op", std::string(reduceOpName(a.op)), std::string(reduceOpName(b.op)));
  if (a.root != b.root) add("root", std::to_string(a.root), std::to_string(b.root));
  if (a.countHash != b.countHash) {
    add("count", countText(a.countHash),
        countText(b.countHash) + " (only a hash of the count travels)");
  }
  return text;
}

std::string describeDisagreement(uint64_t mine, uint64_t theirs, int rank, int peer) {
  const std::string fields = describeMismatch(mine, theirs, peer);
  if (fields.empty()) return "";
  const std::string ranks = "rank " + std::to_string(rank);
  if (isPointToPoint(decodeFingerprint(mine).kind) &&
      isPointToPoint(decodeFingerprint(theirs).kind)) {
    return ranks + " and its peer " + std::to_string(peer) + " disagree on a send/recv: " + fields;
  }
  return ranks + " and rank " + std::to_string(peer) + " run different collectives: " + fields;
}

}  // namespace collie
