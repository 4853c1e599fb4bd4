#pragma once
// Folders of images as a classification dataset, the way people keep photos and scans: DIR/<class>/<image>,
// or DIR/train/<class>/... with DIR/test/<class>/... beside it. The classes are the subfolder names in sorted
// order (label 0 is the first); the test split must have the same class folders as the training split.
//
// Every file Qt's image readers decode (PNG, JPEG, BMP, GIF; WebP and TIFF with the Qt image formats plugins)
// is converted to the requested channels (1: grayscale, 3: RGB; transparency is dropped) and stretched to
// H by W with smooth scaling, so images of mixed sizes and colours are fine. Samples are U8 pixels [C, H, W],
// which training scales to [0, 1], a quarter of the memory and shard bytes of float32. Files are read in
// sorted order and the classes interleaved (the first image of every class, then the second ...), so the same
// folder gives the same dataset and its first N samples hold every class. Hidden files and files directly in
// DIR are ignored.
//
// A file that does not decode (damaged, or not an image) or a folder inside a class folder is a bad file:
// left out and logged by name, or, with stopAtBadFile, the end of the import, naming it and the reason. A
// class left without images (an empty folder, or nothing in it decodes) is an error naming the folder either
// way: its label would have no sample to learn from.

#include "Result.h"
#include "ml/data/Dataset.h"
#include "ml/data/SampleSource.h"

#include <QString>
#include <QStringList>

#include <memory>

namespace gleaner::ml::ImageFolder {

struct Options
{
    qint64 channels = 1; // 1 or 3
    qint64 height = 28;  // 1..4096, as ModelSpec's input_shape
    qint64 width = 28;
    bool stopAtBadFile = false;
};

struct Folder
{
    DatasetSplit split; // test is empty when the folder has no test/ split
    bool hasTestSplit = false;
    QStringList classes; // label i is classes[i]
    QStringList leftOut; // "path: reason" for each bad file that was skipped
};

Result<Folder> read(const QString& dir, const Options& options);
// The training split as a source for the streamed import: every image is decoded once when it opens (to know
// the bad files, and so every label) and again, one at a time, by readSamples(). `folder` receives all but the
// training set: the classes, the test split (decoded into memory) and the files left out.
Result<std::unique_ptr<SampleSource>> openSource(const QString& dir, const Options& options, Folder& folder);

} // namespace gleaner::ml::ImageFolder
