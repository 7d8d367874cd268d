plugins {
    alias(libs.plugins.android.application)
}

android {
    namespace = "org.mtpedge.demo"
    compileSdk = 35

    defaultConfig {
        applicationId = "org.mtpedge.demo"
        minSdk = 29
        targetSdk = 35
        versionCode = 1
        versionName = "0.1.0"
        ndk {
            // ONNX Runtime's QNN build ships arm64 only; the CPU build also has x86_64 for emulators
            abiFilters += listOf("arm64-v8a")
        }
    }

    buildTypes {
        release {
            isMinifyEnabled = false
            proguardFiles(getDefaultProguardFile("proguard-android-optimize.txt"), "proguard-rules.pro")
        }
    }

    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }

    packaging {
        jniLibs {
            // the QNN backend libraries are loaded by path at run time: keep them extracted on the device
            useLegacyPackaging = true
        }
    }
}

dependencies {
    implementation(project(":engine"))
    implementation(libs.onnxruntime.android.qnn)
}
