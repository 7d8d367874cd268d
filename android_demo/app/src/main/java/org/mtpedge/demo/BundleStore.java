package org.mtpedge.demo;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import android.content.ContentResolver;
import android.content.Context;
import android.database.Cursor;
import android.net.Uri;
import android.provider.DocumentsContract;

/**
 * Where the app finds bundles: folders under its external files directory,
 * {@code /sdcard/Android/data/org.mtpedge.demo/files/bundles/NAME}, which {@code adb push} can write and the app
 * can read without any permission. "Import…" copies a folder picked in the system file picker there.
 */
final class BundleStore {
    /** Progress of an import: bytes copied of the total. */
    interface Progress {
        void onProgress(String file, long copied, long total);
    }

    private final File root;

    BundleStore(Context context) {
        File base = context.getExternalFilesDir(null);
        this.root = new File(base != null ? base : context.getFilesDir(), "bundles");
        if (!root.isDirectory() && !root.mkdirs()) {
            throw new IllegalStateException("cannot create " + root);
        }
    }

    File root() {
        return root;
    }

    /** Bundle folders (those holding a manifest.json), by name. */
    List<File> list() {
        List<File> out = new ArrayList<>();
        File[] children = root.listFiles();
        if (children != null) {
            Arrays.sort(children);
            for (File f : children) {
                if (new File(f, "manifest.json").isFile()) {
                    out.add(f);
                }
            }
        }
        return out;
    }

    /**
     * Copy the files of a picked folder (a flat bundle) into a new bundle folder. Written under a temporary name
     * and renamed at the end, so an interrupted import never looks like a bundle.
     */
    File importTree(ContentResolver resolver, Uri tree, Progress progress) throws IOException {
        String treeId = DocumentsContract.getTreeDocumentId(tree);
        Uri children = DocumentsContract.buildChildDocumentsUriUsingTree(tree, treeId);
        String[] columns = {DocumentsContract.Document.COLUMN_DOCUMENT_ID, DocumentsContract.Document.COLUMN_DISPLAY_NAME,
            DocumentsContract.Document.COLUMN_SIZE, DocumentsContract.Document.COLUMN_MIME_TYPE};
        List<String[]> files = new ArrayList<>();
        long total = 0;
        try (Cursor cursor = resolver.query(children, columns, null, null, null)) {
            if (cursor == null) {
                throw new IOException("the picked folder cannot be listed");
            }
            while (cursor.moveToNext()) {
                if (DocumentsContract.Document.MIME_TYPE_DIR.equals(cursor.getString(3))) {
                    continue;
                }
                files.add(new String[] {cursor.getString(0), cursor.getString(1)});
                total += cursor.getLong(2);
            }
        }
        boolean hasManifest = false;
        for (String[] f : files) {
            hasManifest |= f[1].equals("manifest.json");
        }
        if (!hasManifest) {
            throw new IOException("the picked folder has no manifest.json: pick the bundle folder itself "
                    + "(the output of `mtpedge export`)");
        }
        String name = tree.getLastPathSegment() == null ? "bundle" : new File(treeId.replace(':', '/')).getName();
        File target = new File(root, name);
        File partial = new File(root, "." + name + ".partial");
        deleteTree(partial);
        if (!partial.mkdirs()) {
            throw new IOException("cannot create " + partial);
        }
        long copied = 0;
        byte[] buffer = new byte[1 << 20];
        for (String[] f : files) {
            Uri uri = DocumentsContract.buildDocumentUriUsingTree(tree, f[0]);
            try (InputStream in = resolver.openInputStream(uri);
                 OutputStream out = new FileOutputStream(new File(partial, f[1]))) {
                if (in == null) {
                    throw new IOException("cannot open " + f[1]);
                }
                int read;
                while ((read = in.read(buffer)) > 0) {
                    out.write(buffer, 0, read);
                    copied += read;
                    progress.onProgress(f[1], copied, total);
                }
            }
        }
        deleteTree(target);
        if (!partial.renameTo(target)) {
            throw new IOException("cannot rename " + partial + " to " + target);
        }
        return target;
    }

    private static void deleteTree(File file) {
        File[] children = file.listFiles();
        if (children != null) {
            for (File c : children) {
                deleteTree(c);
            }
        }
        if (file.exists() && !file.delete()) {
            throw new IllegalStateException("cannot delete " + file);
        }
    }
}
