#pragma once
// Bearer tokens: 256 random bits, base64url, with a prefix that says what the token is for ("gla_" admin,
// "gle_" enrollment, "gag_" agent), so a token found in a log is recognised at a glance. Only their SHA-256
// is stored; comparing hashes looked up by index leaks nothing useful through timing.

#include <QByteArray>
#include <QString>

namespace gleaner::coordinator::Tokens {

QByteArray generate(QByteArrayView prefix);
// Lowercase hex SHA-256 of the token text, as stored.
QString hash(QByteArrayView token);
// Random identifier for leases, nonces and agents: 128 bits, hex.
QString randomId();

} // namespace gleaner::coordinator::Tokens
