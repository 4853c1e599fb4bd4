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
#include "ml/data/SampleSource.h"

#include <QString>
#include <QStringList>

#include <functional>
#include <memory>
#include <span>

namespace gleaner::ml::Csv {

struct Table
{
    Dataset data;        // x: F32 [rows, features], y: I64 [rows]
    QStringList features; // the feature columns, in order
    QStringList classes;  // the label names by number, when the labels are names; empty for integer labels
};

// What a table's columns hold, without its features: the feature columns, the class names (for name labels)
// and every row's label.
struct Columns
{
    QStringList features;
    QStringList classes;
    std::vector<qint64> labels;
};

// Receives each row's features (valid during the call); row counts from 0, blank lines left out.
using RowSink = std::function<Status(qint64 row, std::span<const float> features)>;

// Reads `path` row by row, each row checked and handed to `onRow` (which may be empty), with read()'s rules and
// messages; memory is a number per row (its label) whatever the row's width.
Result<Columns> scan(const QString& path, const QString& labelColumn, const QStringList* classes, const RowSink& onRow);

// A training table as a source for the streamed import: read once for its labels when it opens (every row
// checked), again for its rows by readSamples(). `columns` receives its features and classes, to read the
// test file by.
Result<std::unique_ptr<SampleSource>> openSource(const QString& path, const QString& labelColumn, Columns& columns);

// Reads `path`; `labelColumn` names the label's column in the header. `classes` given (a test file after its
// training file): names are numbered as there, and integer labels must be integers there too.
Result<Table> read(const QString& path, const QString& labelColumn, const QStringList* classes = nullptr);

// Training and test files of one table: the test file must have the training file's columns. An empty
// `testPath` reads the training file alone (a test_fraction holds the test set out of it).
Result<DatasetSplit> readPair(const QString& trainPath, const QString& testPath, const QString& labelColumn);

} // namespace gleaner::ml::Csv
