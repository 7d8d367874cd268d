package org.mtpedge.engine;

/** A bundle the engine cannot use; the message names the problem and the fix. */
public class BundleException extends RuntimeException {
    public BundleException(String message) {
        super(message);
    }

    public BundleException(String message, Throwable cause) {
        super(message, cause);
    }
}
