#pragma once
// Tables for tabular models: a CSV file with a header row, one label column and numeric feature columns.
//
// The file is read line by line (RFC 4180: comma-separated, fields optionally in double quotes, "" for a quote
// inside them, CRLF or LF). Every feature must parse as a finite number; an empty field, a word or a row with
// another number of fields is refused naming the file, the line and the column. Labels are either all
// non-negative integers (used as they are) or names, numbered in sorted order of the names the training file
// holds; a test file with a name the training file lacks is refused.

#include "Result.h"
#include "ml/data/Dataset.h"

#include <QString>
#include <QStringList>

namespace gleaner::ml::Csv {

struct Table
{
    Dataset data;        // x: F32 [rows, features], y: I64 [rows]
    QStringList features; // the feature columns, in order
    QStringList classes;  // the label names by number, when the labels are names; empty for integer labels
};

// Reads `path`; `labelColumn` names the label's column in the header. `classes` given (a test file after its
// training file): names are numbered as there, and integer labels must be integers there too.
Result<Table> read(const QString& path, const QString& labelColumn, const QStringList* classes = nullptr);

// Training and test files of one table: the test file must have the training file's columns. An empty
// `testPath` reads the training file alone (a test_fraction holds the test set out of it).
Result<DatasetSplit> readPair(const QString& trainPath, const QString& testPath, const QString& labelColumn);

} // namespace gleaner::ml::Csv
