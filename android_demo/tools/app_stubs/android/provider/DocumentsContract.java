package android.provider;
public final class DocumentsContract {
    public static String getTreeDocumentId(android.net.Uri documentUri) { return null; }
    public static android.net.Uri buildChildDocumentsUriUsingTree(android.net.Uri treeUri, String parentDocumentId) { return null; }
    public static android.net.Uri buildDocumentUriUsingTree(android.net.Uri treeUri, String documentId) { return null; }
    public static final class Document {
        public static final String COLUMN_DOCUMENT_ID = "document_id";
        public static final String COLUMN_DISPLAY_NAME = "_display_name";
        public static final String COLUMN_SIZE = "_size";
        public static final String COLUMN_MIME_TYPE = "mime_type";
        public static final String MIME_TYPE_DIR = "vnd.android.document/directory";
    }
}
