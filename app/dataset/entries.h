// What a manifest entry may be, decided once for every kind of manifest (docs/DATASETS.md,
// "What an entry may be"): the text of a manifest (encodings, line ends, where its relative paths
// point), the file an entry names (regular files only; links resolved, never anything that can
// block), and the walk of a directory manifest (each real directory and file once, links
// followed with loop detection).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mimi::app::dataset {

// ---- the text of a manifest

// Raw manifest bytes -> UTF-8 text with '\n' line ends, or Error(Input) naming `what`: a UTF-8
// byte-order mark is dropped; UTF-16 (LE or BE, with its byte-order mark) is decoded; CRLF is
// left to lines_of. UTF-32, and UTF-16 without a byte-order mark (NUL bytes every other byte),
// are refused with a message saying so. Bytes that are not UTF-8 are kept as they are: a plain
// list may name files whose names are not UTF-8.
std::string decode_manifest_text(const std::string& raw, const std::string& what);

// The lines of a text, each without its '\n' and one trailing '\r' (CRLF files).
std::vector<std::string> lines_of(const std::string& text);

// The folder relative paths of a manifest resolve against (and ids are relative to): the
// manifest's own folder; the current directory for a manifest that is not a regular file (a pipe,
// `<(find ...)`) or that is named through /dev or /proc (/dev/stdin, /dev/fd/N), and for "-".
std::string manifest_base(const std::string& manifest_path);

// ---- the file an entry names

struct EntryCheck {
  enum Kind {
    File,        // a regular file (through any symbolic links): planned
    Unreadable,  // missing, a dangling link, no permission: planned; its shard records the error
                 // unless the file is there by the time the shard runs
    Refused,     // never audio, or reading it could block: a directory, FIFO, socket, device, a
                 // symbolic link loop, a NUL byte in the path: a bad entry of the manifest
  } kind = File;
  std::string why;  // Unreadable / Refused: what is wrong, in words
  dev_t dev = 0;    // File: the real file
  ino_t ino = 0;
};

// The one decision about an entry's path. Never opens the file (a FIFO cannot block it); throws
// Error(Environment) when the machine fails (EIO, ENOMEM, ...) instead of blaming the entry.
EntryCheck check_entry(const std::string& path);

// For the worker, just before it opens an item: Error(Input) "PATH: WHY" when check_entry refuses
// the path (a file replaced by a FIFO since planning would block the worker forever); a missing
// or unreadable file is left to the reader's own message.
void refuse_unless_file(const std::string& path);

// ---- a directory manifest

// Audio files by extension (.wav .flac .ogg .opus .mp3 ...; any case).
bool has_audio_extension(const std::string& name);

struct WalkResult {
  // Absolute paths (under `dir`, through links as named), sorted: regular files and everything
  // else with an audio name (a dangling link, a FIFO named x.wav), for check_entry to judge.
  std::vector<std::string> files;
  std::vector<std::string> refused;  // "path: why": folders that cannot be listed (bad entries)
  std::vector<std::string> notes;    // "path: why": links without an audio name that lead nowhere
  size_t repeated_dirs = 0;          // links to folders already walked (loops, two names of one folder)
  size_t repeated_files = 0;         // second names (links, hard links) of files already listed
};

// Every audio file under `dir`: real folders first (sorted by name), then the folders and files
// symbolic links lead to, each real folder (device, inode) walked once and each real file listed
// once, by its first name in that order. Throws Error(Input) when `dir` itself cannot be listed,
// Error(Environment) when the machine fails.
WalkResult walk_directory(const std::string& dir);

}  // namespace mimi::app::dataset
