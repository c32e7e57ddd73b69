// File names are bytes: the one policy for a path stored in JSON (--json records, the dataset
// plan, journal, index and error lists) or printed in a message.
//
// JSON strings are Unicode; a POSIX path is any bytes but '\0'. A path that is valid UTF-8 is
// stored as itself. One that is not is stored twice: `FIELD` holds it with each invalid byte
// replaced by U+FFFD (for people and for tools that only display it) and `FIELD_hex` holds its
// exact bytes in lowercase hex (for tools that open it: bytes.fromhex(rec["path_hex"])). Readers
// take FIELD_hex when it is there. So the JSON is always valid, the bytes always round-trip, and
// two distinct names never read back as one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mimi::app {

bool is_valid_utf8(const std::string& s);

// `s` with every byte that is not part of valid UTF-8 replaced by U+FFFD.
std::string utf8_lossy(const std::string& s);

// obj[field] = path, following the policy above (adds FIELD_hex for a path that is not UTF-8).
void put_path(nlohmann::json& obj, const std::string& field, const std::string& path);

// The exact bytes put_path stored. Throws nlohmann's errors as obj.at() does when FIELD is absent,
// std::invalid_argument for a FIELD_hex that is not hex or that disagrees with a FIELD beside it
// (FIELD must then be FIELD_hex's bytes as put_path writes them: utf8_lossy).
std::string get_path(const nlohmann::json& obj, const std::string& field);

// j.dump() that never throws on a string that is not UTF-8 (replaced by U+FFFD: any path in a
// record should have gone through put_path; this is the net for free text such as messages).
std::string json_dump(const nlohmann::json& j, int indent = -1);

// A path or any text for a one-line message on a terminal: control characters (a newline in a
// file name), backslashes and bytes that are not UTF-8 written as \xNN, so a message stays one line
// and shows what the name holds.
std::string printable(const std::string& s);

}  // namespace mimi::app
