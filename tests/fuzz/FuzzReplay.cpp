// Replays the seed corpus of one fuzz target through its LLVMFuzzerTestOneInput without libFuzzer, in the
// normal build and with the normal compiler. This keeps every target compiling against today's parsers and
// keeps every checked-in seed (and every reproducer a fuzz run found, once it is copied into the corpus)
// passing in the unit suite, where the libFuzzer runs themselves are too slow to belong.
//
// Usage: fuzz_replay_TARGET FILE_OR_FOLDER...   (exit 0 when every input was replayed; a broken promise aborts)

#include <QByteArray>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QStringList>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

bool replay(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) {
        std::fprintf(stderr, "fuzz replay: cannot read %s: %s\n", qPrintable(path), qPrintable(file.errorString()));
        return false;
    }
    // A copy on the heap of exactly the input's size, as libFuzzer hands it: a read past the end is caught by
    // AddressSanitizer where the build has it.
    const QByteArray content = file.readAll();
    std::unique_ptr<std::uint8_t[]> copy(new std::uint8_t[size_t(content.size())]);
    std::memcpy(copy.get(), content.constData(), size_t(content.size()));
    LLVMFuzzerTestOneInput(copy.get(), size_t(content.size()));
    return true;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 2 || QByteArray(argv[1]) == "--help" || QByteArray(argv[1]) == "-h") {
        std::fprintf(stderr, "Usage: %s FILE_OR_FOLDER...\nReplays each file (folders: every file inside) "
                             "through the fuzz target once.\n", argv[0]);
        return argc < 2 ? 2 : 0;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);

    int replayed = 0;
    for (int i = 1; i < argc; ++i) {
        const QString path = QString::fromLocal8Bit(argv[i]);
        const QFileInfo info(path);
        if (!info.exists()) {
            std::fprintf(stderr, "fuzz replay: %s does not exist\n", qPrintable(path));
            return 2;
        }
        QStringList files;
        if (info.isDir()) {
            QDirIterator it(path, QDir::Files, QDirIterator::Subdirectories);
            while (it.hasNext())
                files << it.next();
            files.sort();
        } else {
            files << path;
        }
        for (const QString& file : files) {
            if (!replay(file))
                return 2;
            ++replayed;
        }
    }
    if (replayed == 0) {
        std::fprintf(stderr, "fuzz replay: no inputs found in the paths given\n");
        return 2;
    }
    std::printf("replayed %d inputs\n", replayed);
    return 0;
}
