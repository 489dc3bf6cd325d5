// Package segment stores message bodies that outlive a checkpoint: opaque
// blobs (the caller's encoding of id, header and body) appended to segment
// files in compressed blocks, and read back by location through a block
// cache.
//
// The caller (the disk store) keeps the index: for each blob its Loc, and
// per segment the live byte count. It deletes segments that hold nothing
// live (Remove) and compacts mostly-dead ones by copying their live blobs
// (Scan, then Writer.Add) into new files and removing the old ones.
//
// # Files
//
// A store is one directory of files named after their segment ID, as eight
// lower-case hex digits plus ".seg":
//
//	00000001.seg
//	00000002.seg
//	0000002a.seg
//
// IDs start at 1. A Writer's first Add creates a file with the next ID: one
// above the highest in the directory when the store was opened, or above
// any created since. Gaps are normal (removed segments). Any other name in
// the directory makes Open fail (ErrForeignFile): it is not ours, and
// guessing is how data is lost.
//
// IDs are not reused while a store is open. They can be after a restart:
// when the segment with the highest ID was removed, Open gives its ID out
// again. That is safe because a segment is removed only when the caller
// holds no Loc into it.
//
// # Layout
//
// All integers are little-endian. // on-disk format; never renumber
//
// A file is a header followed by blocks back to back, without padding:
//
//	+-------------+---------+---------+-- … --+---------+
//	| file header | block 0 | block 1 |       | block n |
//	+-------------+---------+---------+-- … --+---------+
//
// File header, 16 bytes:
//
//	 0       4       8       12      16
//	+-------+-------+-------+-------+
//	| magic |version|  ID   |  CRC  |
//	+-------+-------+-------+-------+
//
//	magic    4 bytes  "bdsg" (0x62 0x64 0x73 0x67)
//	version  uint32   format version, 1
//	ID       uint32   the segment ID; must equal the file name's
//	CRC      uint32   CRC-32C (Castagnoli) of bytes 0…11
//
// Block, a 17-byte header and the payload as stored:
//
//	 0       4       8       12      16  17
//	+-------+-------+-------+-------+---+---------------- … -+
//	|  CRC  |stored |  raw  | count |cdc| payload (stored B)  |
//	+-------+-------+-------+-------+---+---------------- … -+
//
//	CRC     uint32  CRC-32C (Castagnoli) of bytes 4 … 17+stored: everything
//	                after the CRC field, header and payload
//	stored  uint32  length of the payload on disk, at most 1 GiB
//	raw     uint32  length of the payload uncompressed, at most 1 GiB
//	count   uint32  blobs in the block, at least 1
//	cdc     uint8   Codec of the payload: 1 none, 2 S2, 3 Zstandard
//
// The uncompressed payload is the blobs back to back, then a table of
// where each ends:
//
//	+--------+--------+-- … --+----------+-------+-- … --+---------+
//	| blob 0 | blob 1 |       | blob n-1 | end 0 |       | end n-1 |
//	+--------+--------+-- … --+----------+-------+-- … --+---------+
//	                                       uint32          uint32
//
// Blob i spans [end i-1, end i) (blob 0 starts at 0); ends never decrease,
// and end n-1 is the data length, raw - 4·count. Empty blobs are allowed.
// The table lets Scan enumerate blobs and lets Read check that a Loc names
// a whole blob: a Loc that does not (index and file disagree) is a
// *CorruptError, never the neighbouring bytes.
//
// A Loc is (segment, file offset of the block, offset of the blob in the
// uncompressed payload, length). AppendLoc encodes it as four uvarints, 4 to
// 20 bytes, typically 8 to 10.
//
// # Writing
//
// One Writer at a time (the checkpoint's or a compaction's). It never
// appends to an existing file: its first Add creates a new one and writes
// the header. Add buffers blobs into the open block and returns the blob's
// Loc at once: blocks are written back to back, so the block's offset is
// the file's length so far. A block is cut (compressed, CRC'd, written in
// one write) when adding the next blob would take it past
// Options.BlockSize, or when it reaches it: a blob larger than BlockSize is
// a block of its own, and blobs never span blocks (nor files). After a
// block that takes the file to Options.TargetSize or beyond, the file is
// fsynced and closed, and the next Add starts a new file. Finish cuts the
// last block, fsyncs the file being written and the directory. Only then are
// the Writer's Locs readable; until then Read, Scan and Remove refuse its
// segments (ErrBusy). Write and sync errors are sticky: once one happened,
// every later Add and Finish returns it; Finish and Abort end the Writer and
// leave its files on disk for the caller to remove.
//
// A block is stored raw (codec none) when compression saves less than an
// eighth of it: random or already-compressed payloads then cost no
// decompression on reads.
//
// # Crashes and Open
//
// A file is fsynced before the next one is created, so a crash leaves at
// most one torn file: the last, written by a Writer that never finished.
// Open checks every file's header. One as written (its CRC holds) that
// names another format version or another segment is a *CorruptError
// naming the file and field offset: not ours to read. One whose CRC fails
// is damage, and costs nothing: it is logged, and the file's blocks are
// read on their own lengths and CRCs. Open walks the last file's blocks, checking lengths
// and CRCs: the length of the intact prefix is logged and reported as
// SegInfo.Valid, and nothing is repaired or dropped. A last file whose
// header never reached the disk is reported with Valid 0. Such files hold
// no Loc the caller committed (it commits Locs only after Finish returned
// nil), and the caller removes them. Damage anywhere else is found when the
// block is read: Read, ReadMany and Scan return a *CorruptError with the
// file and the offset of the block, and other blocks stay readable;
// ReadManyDamaged reports each blob of a damaged block and reads on.
//
// # Reading and the cache
//
// Read and ReadMany go through an LRU cache of decompressed blocks bounded
// by Options.CacheBytes: a block is read, CRC-checked and decompressed once
// and then served from memory; concurrent misses on one block load it once.
// ReadMany sorts its Locs by block and looks each block up once. Scan reads
// a file sequentially in 1 MiB reads and bypasses the cache. Reads are safe
// for concurrent use, also with the Writer and with Remove.
//
// # Compression: measurements and the default
//
// BenchmarkCodec compresses 64 KiB blocks (the default BlockSize; 1 MiB of
// distinct blocks, so no block stays in the CPU cache) made of 1 KiB or 16
// KiB bodies: JSON-like order events from a seeded generator (field names
// repeat, ids, amounts, timestamps and line items vary) and random bytes.
// One core of an Intel Xeon (2 vCPUs, shared), Go 1.26, klauspost/compress
// 1.20.3; MB/s of uncompressed data:
//
//	                          ratio   compress   decompress
//	JSON, 1 KiB bodies
//	  s2                      2.77     948 MB/s   2333 MB/s
//	  s2 (EncodeBetter)       2.96     449 MB/s   2165 MB/s
//	  zstd SpeedFastest       4.22     348 MB/s   1296 MB/s
//	  zstd SpeedDefault       4.33     285 MB/s   1398 MB/s
//	JSON, 16 KiB bodies
//	  s2                      3.38    1043 MB/s   2723 MB/s
//	  s2 (EncodeBetter)       3.65     532 MB/s   2449 MB/s
//	  zstd SpeedFastest       5.09     420 MB/s   1426 MB/s
//	  zstd SpeedDefault       5.27     337 MB/s   1481 MB/s
//	random, 1 and 16 KiB      1.00    s2 15–19 GB/s, zstd fastest 16 GB/s,
//	                                  zstd default 7–8 GB/s (both detect
//	                                  incompressible input); stored raw
//
// End to end (BenchmarkWrite, BenchmarkReadMany; ext4, fsync at Finish, two
// runs): writing 1 KiB JSON blobs runs at 570–670k msgs/s with s2 and
// 260–310k with zstd; reading them back 64 at a time without the block
// cache, 1.07M msgs/s with s2 and 0.57M with zstd. With a warm cache a Read
// takes about 120 ns (1 KiB) and allocates nothing.
//
// The default, DefaultCodec, is S2. The broker is throughput-bound on two
// cores: every CPU-second the checkpoint spends compressing is taken from
// publishing and delivery, and zstd costs 2.4–2.7 times the CPU of S2 per
// byte written. Refills read blocks on the delivery path, where S2
// decompresses a 64 KiB block in about 25 µs against 50 µs. What zstd buys,
// about 35% fewer bytes on disk (ratio 4.2–5.1 against 2.8–3.4), matters
// less: only bodies that outlive a checkpoint reach segments, and
// compaction keeps files mostly live. S2's EncodeBetter gains 7–8% ratio
// for twice the compression CPU; not worth it either. CodecZstd remains for
// disk-bound deployments, at SpeedFastest: SpeedDefault gains 2–4% ratio
// for 20–25% more compression CPU. Its frames use an 8 MiB window, and the
// decoder refuses larger ones.
package segment
