#include "ml/data/CsvReader.h"

#include <QFile>
#include <QHash>
#include <QSet>

#include <algorithm>
#include <cmath>
#include <optional>

namespace gleaner::ml::Csv {
namespace {

constexpr qint64 kMaxRecordBytes = 1 << 20;
constexpr int kMaxColumns = 100000;

// Reads one record (a line, or more when a quoted field holds line breaks) and splits it into fields.
class RecordReader
{
public:
    RecordReader(QFile& file, QString path) : m_file(file), m_path(std::move(path)) {}

    // Nothing at the end of the file; an error names the line.
    std::optional<Result<QList<QByteArray>>> next()
    {
        QByteArray record;
        for (;;) {
            if (m_file.atEnd() && record.isEmpty())
                return std::nullopt;
            const QByteArray line = m_file.readLine(kMaxRecordBytes + 2);
            ++m_line;
            if (line.isEmpty() && m_file.atEnd()) {
                if (record.isEmpty())
                    return std::nullopt;
                return Result<QList<QByteArray>>(Error{problem(QStringLiteral("ends inside a quoted field"))});
            }
            record += line;
            if (record.size() > kMaxRecordBytes)
                return Result<QList<QByteArray>>(Error{problem(QStringLiteral("has a row longer than 1 MiB"))});
            if (record.count('"') % 2 == 0)
                break; // quotes balanced: the record is complete
        }
        while (record.endsWith('\n') || record.endsWith('\r'))
            record.chop(1);
        if (m_line == 1 && record.startsWith("\xEF\xBB\xBF"))
            record.remove(0, 3); // a byte-order mark some spreadsheets write
        return split(record);
    }

    qint64 line() const { return m_line; }
    QString problem(const QString& what) const { return QStringLiteral("%1 line %2 %3").arg(m_path).arg(m_line).arg(what); }

private:
    Result<QList<QByteArray>> split(const QByteArray& record)
    {
        QList<QByteArray> fields;
        QByteArray field;
        bool quoted = false, wasQuoted = false;
        for (qsizetype i = 0; i < record.size(); ++i) {
            const char c = record[i];
            if (quoted) {
                if (c == '"' && i + 1 < record.size() && record[i + 1] == '"') {
                    field += '"';
                    ++i;
                } else if (c == '"') {
                    quoted = false;
                } else {
                    field += c;
                }
            } else if (c == '"' && field.isEmpty() && !wasQuoted) {
                quoted = wasQuoted = true;
            } else if (c == ',') {
                fields << field;
                field.clear();
                wasQuoted = false;
                if (fields.size() > kMaxColumns)
                    return fail(problem(QStringLiteral("has more than %1 columns").arg(kMaxColumns)));
            } else if (c == '"' || wasQuoted) {
                return fail(problem(QStringLiteral("has a stray quote in column %1").arg(fields.size() + 1)));
            } else {
                field += c;
            }
        }
        fields << field;
        return fields;
    }

    QFile& m_file;
    QString m_path;
    qint64 m_line = 0;
};

bool isNonNegativeInteger(const QByteArray& text)
{
    const QByteArray t = text.trimmed();
    return !t.isEmpty() && t.size() <= 6 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
}

} // namespace

Result<Table> read(const QString& path, const QString& labelColumn, const QStringList* classes)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("%1: cannot be read: %2").arg(path, file.errorString()));
    RecordReader reader(file, path);
    auto header = reader.next();
    if (!header)
        return fail(QStringLiteral("%1 is empty; a table starts with a header row naming its columns").arg(path));
    if (!*header)
        return fail(header->error());
    QStringList names;
    for (const QByteArray& name : header->value())
        names << QString::fromUtf8(name.trimmed());
    const qsizetype labelAt = names.indexOf(labelColumn);
    if (labelAt < 0)
        return fail(QStringLiteral("%1 has no column \"%2\" for the labels; its columns are %3")
                        .arg(path, labelColumn, names.join(QStringLiteral(", "))));
    if (QSet<QString>(names.begin(), names.end()).size() != names.size())
        return fail(QStringLiteral("%1 names a column twice in its header").arg(path));
    Table table;
    for (qsizetype i = 0; i < names.size(); ++i)
        if (i != labelAt)
            table.features << names[i];
    if (table.features.isEmpty())
        return fail(QStringLiteral("%1 has no feature column besides \"%2\"").arg(path, labelColumn));

    std::vector<float> values;
    QList<QByteArray> labels;
    for (;;) {
        auto record = reader.next();
        if (!record)
            break;
        if (!*record)
            return fail(record->error());
        const QList<QByteArray>& fields = record->value();
        if (fields.size() == 1 && fields[0].trimmed().isEmpty())
            continue; // a blank line
        if (fields.size() != names.size())
            return fail(reader.problem(QStringLiteral("has %1 fields where the header has %2").arg(fields.size()).arg(names.size())));
        for (qsizetype i = 0; i < fields.size(); ++i) {
            if (i == labelAt) {
                labels << fields[i].trimmed();
                continue;
            }
            bool ok = false;
            const double value = fields[i].trimmed().toDouble(&ok);
            if (!ok || !std::isfinite(value) || std::abs(value) > 3.0e38)
                return fail(reader.problem(QStringLiteral("column \"%1\" holds \"%2\", not a finite number")
                                               .arg(names[i], QString::fromUtf8(fields[i].left(40)))));
            values.push_back(float(value));
        }
    }
    if (labels.isEmpty())
        return fail(QStringLiteral("%1 has a header and no rows").arg(path));

    // Integer labels, or names numbered in sorted order.
    const bool integers = classes ? classes->isEmpty() : std::all_of(labels.begin(), labels.end(), isNonNegativeInteger);
    std::vector<qint64> numbers;
    numbers.reserve(size_t(labels.size()));
    if (integers) {
        for (qsizetype row = 0; row < labels.size(); ++row) {
            if (!isNonNegativeInteger(labels[row]))
                return fail(QStringLiteral("%1 row %2: label \"%3\" is not a class number like the training file's")
                                .arg(path)
                                .arg(row + 1)
                                .arg(QString::fromUtf8(labels[row].left(40))));
            numbers.push_back(labels[row].toLongLong());
        }
    } else {
        if (classes) {
            table.classes = *classes;
        } else {
            QSet<QString> distinct;
            for (const QByteArray& label : labels) {
                distinct.insert(QString::fromUtf8(label));
                if (distinct.size() > Dataset::kLabelLimit)
                    return fail(QStringLiteral("%1: the label column \"%2\" holds more than %3 different names; is it "
                                               "the right column?")
                                    .arg(path, labelColumn)
                                    .arg(Dataset::kLabelLimit));
            }
            table.classes = QStringList(distinct.begin(), distinct.end());
            table.classes.sort();
        }
        QHash<QString, qint64> numberOf; // one lookup a row, not a scan of the classes
        for (qsizetype i = 0; i < table.classes.size(); ++i)
            numberOf.insert(table.classes[i], i);
        for (qsizetype row = 0; row < labels.size(); ++row) {
            const qint64 number = numberOf.value(QString::fromUtf8(labels[row]), -1);
            if (number < 0)
                return fail(QStringLiteral("%1 row %2: label \"%3\" is not one of the training file's classes (%4)")
                                .arg(path)
                                .arg(row + 1)
                                .arg(QString::fromUtf8(labels[row].left(40)), table.classes.join(QStringLiteral(", "))));
            numbers.push_back(number);
        }
    }
    TensorBundle bundle;
    const qint64 rows = labels.size();
    const QList<qint64> shape{rows, qint64(table.features.size())};
    if (auto added = bundle.add(QStringLiteral("x"), DType::F32, shape,
                                QByteArrayView(reinterpret_cast<const char*>(values.data()), qsizetype(values.size() * sizeof(float))));
        !added)
        return fail(QStringLiteral("%1: %2").arg(path, added.error()));
    if (auto added = bundle.addValues<qint64>(QStringLiteral("y"), DType::I64, {rows}, numbers); !added)
        return fail(QStringLiteral("%1: %2").arg(path, added.error()));
    auto data = Dataset::fromBundle(std::move(bundle), path);
    if (!data)
        return fail(data.error());
    table.data = std::move(*data);
    return table;
}

Result<DatasetSplit> readPair(const QString& trainPath, const QString& testPath, const QString& labelColumn)
{
    auto train = read(trainPath, labelColumn);
    if (!train)
        return fail(train.error());
    if (testPath.isEmpty())
        return DatasetSplit{std::move(train->data), {}};
    auto test = read(testPath, labelColumn, &train->classes);
    if (!test)
        return fail(test.error());
    if (test->features != train->features)
        return fail(QStringLiteral("%1 has the feature columns %2, %3 has %4; both files need the same")
                        .arg(testPath, test->features.join(QStringLiteral(", ")), trainPath,
                             train->features.join(QStringLiteral(", "))));
    return DatasetSplit{std::move(train->data), std::move(test->data)};
}

} // namespace gleaner::ml::Csv
